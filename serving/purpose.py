"""What a model is for: chat (instruction-tuned: it answers a conversation) or completions (a base
model: it continues the text it is given, and answers a chat by writing the question back).

The panel records it per model variant (guessed at import, editable in the catalog); it travels to
the agent on the launch's model (`ModelRef.purpose`), and the switch's health gate tests what the
model is for: a chat model must answer a test chat, a completions model a test completion
(hostagent.runtime.readiness). Clients' configs follow it (serving.exports).

Where the metadata tells (`guess_purpose`): the name's fine-tune marker (GGUF `general.finetune`,
"-it", "-Instruct", "-Chat" in `general.name`, a file name or a repository id) or a base marker
("-Base", "-pt"); then a GGUF named by the converter's naming fields (`general.basename`) with no
fine-tune, no model it derives from (`general.base_model.*`) and no chat template
(`tokenizer.chat_template`) is the base model itself, as the GGUF naming convention has it (ggml
docs/gguf.md: the FineTune part says what the base model was optimised toward). A chat template
keeps it chat: chat releases converted without a model card (Qwen3-8B, gpt-oss) carry no finetune
but do carry their template. Otherwise chat: what a lab serves, and the strict gate.

Pure: no Django, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

CHAT = "chat"
COMPLETIONS = "completions"
PURPOSES = (CHAT, COMPLETIONS)

# Name tokens (split on anything but letters and digits, case aside) that mark an instruction tune.
TUNED_MARKERS = frozenset({"it", "instruct", "instruction", "chat", "sft", "rlhf", "dpo"})
# ... and the base (pretrained) model.
BASE_MARKERS = frozenset({"base", "pt", "pretrained", "pretrain"})


@dataclass(frozen=True)
class GgufNaming:
    """A GGUF header's naming fields (gguf-py Keys.General)."""

    finetune: str | None = None  # general.finetune ("it", "Instruct")
    name: str | None = None  # general.name
    basename: str | None = None  # general.basename: written by the converter's naming metadata
    derived: bool = False  # general.base_model.count > 0: made from another model
    has_template: bool = False  # tokenizer.chat_template is set: the model was released to chat


@dataclass(frozen=True)
class PurposeGuess:
    purpose: str  # CHAT | COMPLETIONS
    why: str  # in words, for the import's message

    @property
    def label(self) -> str:
        return purpose_label(self.purpose)


def purpose_label(purpose: str) -> str:
    return "completions (base model)" if purpose == COMPLETIONS else "chat (instruction-tuned)"


def marker(text: str | None) -> str | None:
    """The purpose a name's tokens mark ("gemma-3-270m-it" -> CHAT, "Qwen3-8B-Base" -> COMPLETIONS), or None."""
    tokens = re.split(r"[^a-z0-9]+", (text or "").casefold())
    if any(token in TUNED_MARKERS for token in tokens):
        return CHAT
    if any(token in BASE_MARKERS for token in tokens):
        return COMPLETIONS
    return None


def guess_purpose(names: Sequence[tuple[str, str | None]], *, gguf: GgufNaming | None = None) -> PurposeGuess:
    """The purpose the metadata tells, from `names` (what each is, its text: a file name, a repository
    id) after the GGUF header's own names; chat when nothing tells."""
    named: list[tuple[str, str | None]] = []
    if gguf is not None:
        named += [("general.finetune", gguf.finetune), ("general.name", gguf.name), ("general.basename", gguf.basename)]
    named += list(names)
    for what, text in named:
        found = marker(text)
        if found is not None:
            kind = "an instruction tune" if found == CHAT else "a base model"
            return PurposeGuess(found, f"{what} {(text or '')[:80]!r} marks {kind}")
    if gguf is not None and gguf.basename and not gguf.finetune and not gguf.derived and not gguf.has_template:
        named_as = (gguf.name or gguf.basename)[:80]
        return PurposeGuess(
            COMPLETIONS,
            f"the GGUF names its model ({named_as!r}) with no fine-tune (general.finetune), no model it "
            "derives from (general.base_model) and no chat template: the base model itself",
        )
    return PurposeGuess(CHAT, "nothing in its names or metadata marks a base model")

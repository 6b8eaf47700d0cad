"""What a model is for, as its names and GGUF metadata tell (serving.purpose): the switch's health
gate tests a chat for a chat model and a completion for a base model."""

from __future__ import annotations

import pytest

from serving.purpose import CHAT, COMPLETIONS, GgufNaming, guess_purpose, marker


@pytest.mark.parametrize(
    ("name", "purpose"),
    [
        ("gemma-3-270m-it", CHAT),
        ("unsloth/gemma-3-270m-it-GGUF", CHAT),
        ("Qwen2.5-7B-Instruct", CHAT),
        ("llama-2-7b-chat.Q4_K_M.gguf", CHAT),
        ("Qwen3-8B-Base", COMPLETIONS),
        ("gemma-3-1b-pt", COMPLETIONS),
        ("Qwen3-8B", None),  # says nothing: a token, not a substring ("unit", "italian", "chatty" neither)
        ("unit-italian-chatty-7b", None),
        ("", None),
    ],
)
def test_a_names_tokens_mark_an_instruction_tune_or_a_base_model(name: str, purpose: str | None) -> None:
    assert marker(name) == purpose


SHIPPED = GgufNaming(name="Gemma 3 270m", basename="gemma-3")  # the package's Gemma 3 270M header
TUNED = GgufNaming(finetune="it", name="Gemma 3 270m It", basename="gemma-3")  # the -it conversion's


@pytest.mark.parametrize(
    ("names", "gguf", "purpose", "why"),
    [
        ((), SHIPPED, COMPLETIONS, "no fine-tune (general.finetune), no model it derives from"),
        # A chat release converted without a model card (Qwen3-8B, gpt-oss): no finetune, but its chat
        # template says it was released to chat; the same header without one is the base model.
        ((), GgufNaming(name="Qwen3 8B", basename="Qwen3", has_template=True), CHAT, "nothing in its names"),
        ((), GgufNaming(name="Qwen3 8B", basename="Qwen3"), COMPLETIONS, "and no chat template"),
        ((), TUNED, CHAT, "general.finetune 'it' marks an instruction tune"),
        # The header says nothing of a tune but the file's name does: the name counts first.
        ((("the file name", "gemma-3-270m-it-Q4_K_M.gguf"),), SHIPPED, CHAT, "the file name"),
        # Made from another model (general.base_model.*): a fine-tune, whatever its name.
        ((), GgufNaming(name="Qwen3 8B", basename="Qwen3", derived=True), CHAT, "nothing in its names"),
        # An older converter wrote only general.name: nothing tells, the strict gate.
        ((), GgufNaming(name="LLaMA v2"), CHAT, "nothing in its names"),
        ((("the repository id", "Qwen/Qwen3-8B-Base"),), None, COMPLETIONS, "marks a base model"),
        # Meta's base model, but nothing in its name says so: chat, the strict gate (the catalog corrects it).
        ((("the repository id", "meta-llama/Llama-3.1-8B"),), None, CHAT, "nothing in its names"),
    ],
)
def test_the_guess_reads_the_header_then_the_names_and_says_why(
    names: tuple[tuple[str, str], ...], gguf: GgufNaming | None, purpose: str, why: str
) -> None:
    guess = guess_purpose(names, gguf=gguf)
    assert guess.purpose == purpose and why in guess.why

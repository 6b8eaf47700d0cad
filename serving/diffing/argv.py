"""Command-line diff: two launch argv lists compared flag by flag (never as text lines)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from core.secrets_mask import MASK, is_secret_name, mask_text
from serving.diffing import fmt
from serving.diffing.rows import DiffRow, DiffSection, kind_of

COMMAND = "(command)"
SWITCH = "on"  # a flag given without a value
_VALUE_LIKE = re.compile(r"^-\d|^-\.\d")  # "-1" is a value, not a flag


def _is_flag(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and not _VALUE_LIKE.match(word)


def parse_argv(argv: Sequence[str]) -> dict[str, str]:
    """{"(command)": "vllm serve org/model", "--max-model-len": "65536", "--enforce-eager": "on"}.

    Values of secret-looking flags (and KEY=VALUE words with secret names) are masked even if
    the caller forgot to. A repeated flag keeps all its values, comma-joined.
    """
    out: dict[str, str] = {}
    words: list[str] = []
    i = 0
    tokens = [str(t) for t in argv]
    while i < len(tokens):
        token = tokens[i]
        if not _is_flag(token):
            name, eq, val = token.partition("=")
            words.append(f"{name}={MASK}" if eq and is_secret_name(name) and val else mask_text(token))
            i += 1
            continue
        flag, eq, val = token.partition("=")
        if not eq:
            if i + 1 < len(tokens) and not _is_flag(tokens[i + 1]):
                val = tokens[i + 1]
                i += 1
            else:
                val = SWITCH
        i += 1
        val = MASK if is_secret_name(flag) and val != SWITCH else mask_text(val)
        out[flag] = f"{out[flag]},{val}" if flag in out else val
    if words:
        out = {COMMAND: " ".join(words), **out}
    return out


def _knob_name(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def argv_section(old: Sequence[str] | None, new: Sequence[str] | None, *, noise: frozenset[str]) -> DiffSection | None:
    if old is None and new is None:
        return None
    a, b = parse_argv(old or ()), parse_argv(new or ())
    order = list(a) + [k for k in b if k not in a]
    rows = []
    for flag in order:
        if _knob_name(flag) in noise:
            continue
        kind = kind_of(flag in a, flag in b, a.get(flag) == b.get(flag))
        rows.append(DiffRow(flag, a.get(flag, fmt.ABSENT), b.get(flag, fmt.ABSENT), kind))
    title = "Command line" + ("" if old is not None and new is not None else " (one side could not be built)")
    return DiffSection("argv", title, tuple(rows), headers=("Flag", "Old", "New"))

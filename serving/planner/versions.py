"""Engine version strings -> comparable tuples. "" means "the latest known" (no floor applies)."""

from __future__ import annotations

import re

_NUM = re.compile(r"\d+")


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """ "0.17.1" -> (0, 17, 1); "v0.5.9" -> (0, 5, 9); "b6500" (llama.cpp build) -> (6500,).

    Pre-release/dev suffixes are dropped ("0.11.0rc2" -> (0, 11, 0)). None for "" or no digits.
    """
    if not text:
        return None
    core = text.strip().lstrip("vV")
    core = re.split(r"(?:rc|dev|a|b(?=\d*$)|\+)", core, maxsplit=1)[0] if not core.startswith("b") else core[1:]
    numbers = [int(n) for n in _NUM.findall(core.split("-")[0])]
    return tuple(numbers) if numbers else None


def version_lt(version: str | None, floor: str) -> bool:
    """True only when `version` is known and older than `floor`."""
    have, need = parse_version(version), parse_version(floor)
    if have is None or need is None:
        return False
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) < need + (0,) * (width - len(need))


def version_in(version: str | None, low: str, high: str) -> bool:
    """low <= version < high, for a known version."""
    return parse_version(version) is not None and not version_lt(version, low) and version_lt(version, high)

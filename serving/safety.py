"""Shape checks for anything a user sends that will be stored or handed to an engine (pure).

PostgreSQL's jsonb refuses NUL characters, Python's json accepts NaN and Infinity, and a
nested value can be made arbitrarily deep or large. Every JSON-ish value that reaches a
model field or an engine goes through `check_json_value` first, so bad input is a clear
error naming its field instead of a 500 (or a stored value that breaks later pages).
"""

from __future__ import annotations

import math
from typing import Any


class UnsafeValueError(ValueError):
    """A value that cannot be stored or used; `field` names where it came from."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


MAX_DEPTH = 12
MAX_ITEMS = 2_000  # containers plus scalars, over the whole value
MAX_TEXT = 100_000  # characters in one string
MAX_INT = 2**63 - 1  # PostgreSQL bigint; also far beyond any real engine setting


def check_text_value(text: str, *, field: str, max_len: int = MAX_TEXT) -> str:
    """One string: no NUL, not absurdly long."""
    if "\x00" in text:
        raise UnsafeValueError(f"{field} contains a NUL character", field=field)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (from a \ud800 escape or a non-UTF-8 argument)
            raise UnsafeValueError(f"{field} contains text that is not valid Unicode", field=field) from None
    if len(text) > max_len:
        raise UnsafeValueError(f"{field} is too long ({len(text):,} characters; at most {max_len:,})", field=field)
    return text


def check_number(value: object, *, field: str) -> int | float:
    """A finite int or float within a 64-bit range (bool is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UnsafeValueError(f"{field} must be a number, not {value!r}", field=field)
    if isinstance(value, float) and not math.isfinite(value):
        raise UnsafeValueError(f"{field} must be a finite number, not {value!r}", field=field)
    if abs(value) > MAX_INT:
        raise UnsafeValueError(f"{field} is out of range", field=field)
    return value


def check_json_value(
    value: object,
    *,
    field: str,
    max_depth: int = MAX_DEPTH,
    max_items: int = MAX_ITEMS,
    max_text: int = MAX_TEXT,
) -> Any:
    """Return `value` unchanged if it is plain JSON that any database stores and any page
    renders: dict keys are strings, strings hold no NUL, numbers are finite and 64-bit,
    nesting and size are bounded. Raise UnsafeValueError naming `field` otherwise."""
    count = 0

    def walk(item: object, depth: int, where: str) -> None:
        nonlocal count
        count += 1
        if count > max_items:
            raise UnsafeValueError(f"{field} is too large (more than {max_items:,} values)", field=field)
        if depth > max_depth:
            raise UnsafeValueError(f"{field} is nested too deeply (more than {max_depth} levels)", field=field)
        if item is None or isinstance(item, bool):
            return
        if isinstance(item, str):
            check_text_value(item, field=where, max_len=max_text)
            return
        if isinstance(item, int | float):
            check_number(item, field=where)
            return
        if isinstance(item, dict):
            for key, sub in item.items():
                if not isinstance(key, str):
                    raise UnsafeValueError(f"{where} has a key that is not text: {key!r}", field=field)
                check_text_value(key, field=where, max_len=200)
                walk(sub, depth + 1, f"{where}.{key}")
            return
        if isinstance(item, list | tuple):
            for index, sub in enumerate(item):
                walk(sub, depth + 1, f"{where}[{index}]")
            return
        raise UnsafeValueError(f"{where} holds a {type(item).__name__}, which is not JSON", field=field)

    try:
        walk(value, 0, field)
    except UnsafeValueError as exc:
        raise UnsafeValueError(str(exc), field=field) from None
    return value

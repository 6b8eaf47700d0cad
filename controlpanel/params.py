"""Parse what arrives in a URL's query string or a form's number fields, strictly.

`str.isdigit()` is the wrong test for "a number": it is True for `'²'` and `'٣'`, which
`int()` then refuses or reads as 3, and for a 5,000-digit string, which `int()` refuses
(Python caps int-from-text at 4,300 digits). `float()` reads `'inf'` and `'nan'`. A query
parameter that is not a clean, bounded number is the client's error: `BadParameter` is a
`BadRequest`, which Django answers with 400, never 500, and nothing is read or changed.

The form fields below apply the same rules to posted forms: ASCII digits only, bounded
length and magnitude, finite floats. They give a form error beside the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from django import forms
from django.core.exceptions import BadRequest, ValidationError

# PostgreSQL bigint: no id, number or count we store is larger, and a 19-digit limit keeps
# every parse O(1).
MAX_INT = 2**63 - 1
MAX_INT_DIGITS = 19
MAX_TEXT_PARAM = 200  # a filter or a name in a query string; nothing longer is meaningful

_INT_RE = re.compile(rf"-?[0-9]{{1,{MAX_INT_DIGITS}}}", re.ASCII)
_DIGITS_RE = re.compile(r"-?[0-9]+", re.ASCII)


class BadParameter(BadRequest):
    """A malformed or out-of-range request parameter (answered with 400)."""


def parse_int(text: str, *, name: str, minimum: int = 0, maximum: int = MAX_INT) -> int:
    """`text` as an int in [minimum, maximum]: optional `-`, then ASCII digits only.

    Raises ValueError with a message naming `name` (callers turn it into a 400 or a form error)."""
    text = text.strip()
    if not _INT_RE.fullmatch(text):
        if _DIGITS_RE.fullmatch(text):  # digits, but more of them than any value we take
            raise ValueError(f"{name} must be between {minimum} and {maximum}, not {_show(text)}")
        raise ValueError(f"{name} must be a whole number written with the digits 0-9, not {_show(text)}")
    number = int(text)
    if not minimum <= number <= maximum:
        raise ValueError(f"{name} must be between {minimum} and {maximum}, not {_show(text)}")
    return number


def int_param(
    params: Mapping[str, Any],
    name: str,
    *,
    default: int | None = None,
    minimum: int = 0,
    maximum: int = MAX_INT,
) -> int | None:
    """An int query (or path) parameter: absent or empty -> `default`; malformed or out of
    range -> BadParameter (400)."""
    raw = params.get(name)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return default
    try:
        return parse_int(str(raw), name=name, minimum=minimum, maximum=maximum)
    except ValueError as exc:
        raise BadParameter(str(exc)) from None


def text_param(params: Mapping[str, Any], name: str, *, default: str = "", max_length: int = MAX_TEXT_PARAM) -> str:
    """A text query parameter, stripped: no NUL (PostgreSQL refuses it in a query), bounded
    length; otherwise BadParameter (400)."""
    raw = params.get(name)
    if raw is None:
        return default
    text = str(raw).strip()
    if "\x00" in text:
        raise BadParameter(f"{name} contains a NUL character")
    if len(text) > max_length:
        raise BadParameter(f"{name} is too long (at most {max_length} characters)")
    return text


def _show(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:40] + "…")


# --- form fields -------------------------------------------------------------------------------


class StrictIntegerField(forms.IntegerField):
    """IntegerField that accepts only ASCII digits (Django's reads `'٣'` as 3 and `'1.0'` as 1)
    and never more than a bigint; give `max_value` for anything smaller."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_value", MAX_INT)
        kwargs.setdefault("min_value", -MAX_INT)
        super().__init__(*args, **kwargs)

    def to_python(self, value: object) -> int | None:
        if value in self.empty_values:
            return None
        if isinstance(value, bool):
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        if isinstance(value, int):
            return value
        if not _INT_RE.fullmatch(str(value).strip()):
            raise ValidationError(
                "Enter a whole number using the digits 0-9 (at most %(n)d of them).",
                code="invalid",
                params={"n": MAX_INT_DIGITS},
            )
        return int(str(value).strip())


class FiniteFloatField(forms.FloatField):
    """FloatField that refuses inf/nan in any spelling, non-ASCII digits and absurd magnitudes; `max_value` is
    required so every number a form takes has a ceiling someone chose."""

    def __init__(self, *args: Any, max_value: float, **kwargs: Any) -> None:
        super().__init__(*args, max_value=max_value, **kwargs)

    def to_python(self, value: object) -> float | None:
        if isinstance(value, str) and len(value.strip()) > 40:
            raise ValidationError("That number is too long.", code="invalid")
        if isinstance(value, str) and not value.isascii():  # float() reads '٣' as 3.0
            raise ValidationError("Enter a number using the digits 0-9.", code="invalid")
        number = super().to_python(value)
        if number is not None and not math.isfinite(number):
            raise ValidationError("Enter a finite number.", code="invalid")
        return number


class StrictModelChoiceField(forms.ModelChoiceField):
    """ModelChoiceField whose key must be plain ASCII digits (Django's reads `'٣'` as pk 3)."""

    def to_python(self, value: object) -> Any:
        if value not in self.empty_values and not isinstance(value, int) and not _INT_RE.fullmatch(str(value)):
            raise ValidationError(self.error_messages["invalid_choice"], code="invalid_choice")
        return super().to_python(value)

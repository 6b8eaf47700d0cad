"""The serving core's input errors share one shape: a refused value and the field it belongs to."""

from __future__ import annotations


class FieldError(ValueError):
    """A refused input; `field` names where it belongs, so that a form or a caller can show the
    message beside it. A raiser that names no field leaves the class's `field_default`."""

    field_default: str | None = None
    field: str | None

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = self.field_default if field is None else field

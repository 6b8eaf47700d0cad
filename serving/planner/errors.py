"""The planner's input error (its own module, so every planner module can raise it)."""

from __future__ import annotations


class PlanInputError(ValueError):
    """Bad input to the planner (unknown knob, bad value, unknown engine). CLI exit code 2.

    `field` names the knob or input so a form can show the message beside it.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

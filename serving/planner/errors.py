"""The planner's input error (its own module, so every planner module can raise it)."""

from __future__ import annotations

from serving.errors import FieldError


class PlanInputError(FieldError):
    """Bad input to the planner (unknown knob, bad value, unknown engine). CLI exit code 2.

    `field` names the knob or input so a form can show the message beside it.
    """

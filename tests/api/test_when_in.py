"""`at`/`window` in the bodies that can schedule a change (api.schemas.WhenIn): one home for the
fields and for what they mean to change_schedule."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError

from api.endpoints.rollouts import RolloutIn
from api.schemas import ChangeIn, ScheduleIn

AT = datetime(2026, 12, 5, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    "body",
    [
        ChangeIn(host="lab", kind="switch", revision=2),
        RolloutIn(group="gpu-a"),
    ],
)
def test_neither_runs_now_and_both_are_refused(body):
    assert body.when() is None
    assert body.model_copy(update={"at": AT}).when() == {"at": AT}
    assert body.model_copy(update={"window": True}).when() == {"in_window": True}
    with pytest.raises(ValidationError, match="not both"):
        body.model_copy(update={"at": AT, "window": True}).when()


def test_a_scheduled_change_needs_one_of_the_two():
    body = ScheduleIn(kind="switch", host="lab", revision=2)
    for wrong in ({}, {"at": AT, "window": True}):
        with pytest.raises(ValidationError, match="one of the two"):
            body.model_copy(update=wrong).schedule()
    assert body.model_copy(update={"at": AT}).schedule() == {"at": AT}
    assert body.model_copy(update={"window": True}).schedule() == {"in_window": True}

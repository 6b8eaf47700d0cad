"""The rollout's wave plan and its next step: pure, no database (serving/rollouts.py)."""

from __future__ import annotations

import pytest

from serving.rollouts import (
    DONE,
    FAILED,
    FINISH,
    PENDING,
    ROLL_BACK,
    ROLLBACK_FAILED,
    ROLLED_BACK,
    ROLLING_BACK,
    START,
    STOP,
    SWITCHING,
    WAIT,
    Step,
    WavePlanError,
    failed_wave,
    next_step,
    plan_waves,
)

HOSTS = ["e", "a", "d", "b", "c"]


@pytest.mark.parametrize(
    ("batch", "canary", "waves"),
    [
        (1, "", [["a"], ["b"], ["c"], ["d"], ["e"]]),
        (2, "", [["a"], ["b", "c"], ["d", "e"]]),
        (3, "c", [["c"], ["a", "b", "d"], ["e"]]),
        (100, "e", [["e"], ["a", "b", "c", "d"]]),
    ],
)
def test_the_canary_goes_alone_first_then_batches_by_name(batch, canary, waves):
    assert plan_waves(HOSTS, batch_size=batch, canary=canary) == waves


def test_one_host_is_a_canary_alone():
    assert plan_waves(["solo", "solo"], batch_size=5) == [["solo"]]


@pytest.mark.parametrize(
    ("hosts", "batch", "canary", "says"),
    [
        ([], 1, "", "no hosts"),
        (HOSTS, 0, "", "batch size"),
        (HOSTS, 101, "", "batch size"),
        (HOSTS, True, "", "batch size"),
        (HOSTS, "2", "", "batch size"),
        (HOSTS, 2, "zz", "not in the group"),
    ],
)
def test_a_plan_that_cannot_be_made_says_why(hosts, batch, canary, says):
    with pytest.raises(WavePlanError, match=says):
        plan_waves(hosts, batch_size=batch, canary=canary)


WAVES = [["a"], ["b", "c"], ["d", "e"]]


@pytest.mark.parametrize(
    ("states", "paused", "step"),
    [
        ({}, False, Step(START, 0, ("a",))),
        ({}, True, Step(WAIT, 0)),
        ({"a": SWITCHING}, False, Step(WAIT)),
        ({"a": DONE}, False, Step(START, 1, ("b", "c"))),
        ({"a": DONE}, True, Step(WAIT, 1)),
        ({"a": DONE, "b": DONE, "c": SWITCHING}, False, Step(WAIT)),
        ({"a": DONE, "b": DONE, "c": DONE}, False, Step(START, 2, ("d", "e"))),
        ({k: DONE for k in "abcde"}, False, Step(FINISH)),
        # The canary failed: nothing else is touched.
        ({"a": FAILED}, False, Step(STOP, 0)),
        # The second wave failed on c: b took the change and is put back; d and e never start.
        ({"a": DONE, "b": DONE, "c": FAILED}, False, Step(ROLL_BACK, 1, ("b",))),
        ({"a": DONE, "b": ROLLING_BACK, "c": FAILED}, False, Step(WAIT)),
        ({"a": DONE, "b": ROLLED_BACK, "c": FAILED}, False, Step(STOP, 1)),
        ({"a": DONE, "b": ROLLBACK_FAILED, "c": FAILED}, False, Step(STOP, 1)),
        # Paused does not hold back putting a failed wave back.
        ({"a": DONE, "b": DONE, "c": FAILED}, True, Step(ROLL_BACK, 1, ("b",))),
        ({"a": DONE, "b": FAILED, "c": FAILED, "d": PENDING}, False, Step(STOP, 1)),
    ],
)
def test_next_step(states, paused, step):
    assert next_step(WAVES, states, paused=paused) == step


def test_failed_wave_names_the_first_wave_with_a_failure():
    assert failed_wave(WAVES, {"a": DONE, "d": FAILED}) == 2
    assert failed_wave(WAVES, {"a": DONE}) is None

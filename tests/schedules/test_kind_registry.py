"""Each kind of change that can be scheduled is registered by the app that owns the change
(deployments: switch and alias move; rollouts: rollout), so a change of every kind offered on the
pages and the API can be scheduled and run, and described in words."""

from __future__ import annotations

import pytest

from schedules.choices import ChangeKind
from schedules.kinds import KINDS, describe, kind_register


def test_every_kind_a_person_can_pick_is_registered_when_the_panel_starts():
    assert set(KINDS) == set(ChangeKind.values)
    assert describe(ChangeKind.SWITCH, {"revision": 5}) == "switch to r5"
    assert describe(ChangeKind.ALIAS, {"name": "chat", "revision": 2}) == "move alias chat to r2"
    assert describe("retired-kind", {"x": 1}) == "retired-kind"  # a stored row of a kind no app registers


def test_a_kind_outside_the_choices_or_registered_twice_is_refused():
    with pytest.raises(ValueError, match="not a ChangeKind"):
        kind_register("reboot", KINDS[ChangeKind.SWITCH])
    with pytest.raises(ValueError, match="registered already"):
        kind_register(ChangeKind.SWITCH, KINDS[ChangeKind.ALIAS])
    kind_register(ChangeKind.SWITCH, KINDS[ChangeKind.SWITCH])  # the same again (a second ready()): no change
    assert KINDS[ChangeKind.SWITCH].describe({"revision": 1}) == "switch to r1"

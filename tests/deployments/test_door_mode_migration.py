"""A panel upgraded to the door mode (deployments 0017_door_mode) keeps the promise its Keys page
made ("Clients using it get 401"): a panel that ever made a key, even one whose keys are all
revoked now, comes up with keys required, never open; one that never made a key stays open."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("deployments", "0016_measured_memory")]
AFTER = [("deployments", "0017_door_mode")]


def _apps(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state(targets).apps


@pytest.mark.parametrize("made", [True, False])
def test_a_panel_whose_every_key_was_revoked_comes_up_closed(made: bool) -> None:
    try:
        old = _apps(BEFORE)
        if made:
            old.get_model("deployments", "InferenceKey").objects.create(
                name="only", sha256="a" * 64, prefix="cpk_aaaaaaaa", revoked_at="2026-12-01T00:00:00Z"
            )
        new = _apps(AFTER)
        modes = list(new.get_model("deployments", "DoorPolicy").objects.values_list("mode", flat=True))
        assert modes == (["keys_required"] if made else [])  # no row: open, a fresh install's mode
    finally:
        _apps(MigrationExecutor(connection).loader.graph.leaf_nodes())

"""The panel's serving answer (GET /agent/v1/serving, hostagent/PROTOCOL.md) made into what the
front door serves: its RoutingTable, its KeyTable, its queue and drain limits, and for the loader
each model's revision and launch.

Each engine listens on its launch's port (the panel refuses two served revisions on one port; a
table that has them is refused here too), at the host's engine bind address
(CONTROLPANEL_ENGINE_BIND_HOST): the agent builds each upstream from them.

The last answer is kept in <state>/private/serving.json (0600, in a 0700 folder, like the engines'
key files), so an agent restarted while the panel is away serves again at once.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.atomicfile import write_atomic
from hostagent.frontdoor import KeyTable, RoutingTable, ServedModel
from hostagent.frontdoor.table import Mode, TableError
from hostagent.launch import launch_api_key, launch_engine, launch_port, launch_revision
from serving.engines.knobs import url_host
from serving.engines.registry import ADAPTERS

from .loader import Served

__all__ = ["ServingSet", "ServingStore", "serving_set"]

LIMITS = {"max_waiting": "queue_max", "max_wait_s": "queue_wait_s", "drain_timeout_s": "drain_timeout_s"}


@dataclass(frozen=True)
class ServingSet:
    version: str | None
    table: RoutingTable
    keys: KeyTable
    served: dict[str, Served] = field(repr=False)
    limits: dict[str, float]  # FrontDoorSettings fields the panel set for this host


def serving_set(answer: Mapping[str, Any], *, bind_host: str, active_revision: str | None = None) -> ServingSet:
    """Raises TableError (the whole answer refused) when a model or key breaks a rule. The host's
    active revision is the panel's first model when it is pinned, or the one the host's supervisor
    runs (`active_revision`, its record's): the supervisor's engine, which the door never starts."""
    rows = answer.get("models")
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise TableError('the serving answer has no "models" list')
    models: list[ServedModel] = []
    served: dict[str, Served] = {}
    ports: dict[int, str] = {}
    for index, row in enumerate(rows):
        entry = {k: v for k, v in row.items() if k not in ("revision", "launch")}
        launch = row.get("launch")
        if isinstance(launch, dict):
            revision_id, label = launch_revision(launch)
            port = launch_port(launch)
            if port in ports:
                raise TableError(f"{ports[port]} and {label} both listen on port {port}")
            ports[port] = label
            entry["upstream"] = f"http://{url_host(bind_host)}:{port}"
            entry["api_key"] = entry.get("api_key") or launch_api_key(launch)
            entry["revision"] = label  # told to clients that still call a name this set no longer serves
            adapter = ADAPTERS.get(launch_engine(launch))
            if adapter is not None:  # the paths its engine answers: the adapter's fact
                entry.setdefault("engine", adapter.label)
                entry.setdefault("paths", sorted(adapter.api_paths))
        model = ServedModel.from_dict(entry)
        models.append(model)
        if isinstance(launch, dict):
            active = (index == 0 and model.mode is Mode.PINNED) or revision_id == active_revision
            served[model.name] = Served(model.name, revision_id, label, launch, pinned=active)
    table = RoutingTable(tuple(models))
    try:
        keys = KeyTable.from_dict(answer.get("keys") or {"keys": []})
    except (ValueError, KeyError, TypeError) as exc:
        raise TableError(f"the key table: {exc}") from exc
    door = answer.get("door")
    door = door if isinstance(door, dict) else {}
    limits = {LIMITS[k]: float(v) for k, v in door.items() if k in LIMITS and isinstance(v, int | float) and v >= 0}
    version = answer.get("version")
    return ServingSet(None if version is None else str(version), table, keys, served, limits)


class ServingStore:
    """The last serving answer on the host's disk, and the door's usage totals."""

    def __init__(self, state: Path) -> None:
        self.folder = state / "private"
        self.answer_file = self.folder / "serving.json"
        self.usage_file = state / "frontdoor-usage.json"

    def _write(self, path: Path, data: Any) -> None:
        """Whole or not at all, 0600 (the answer holds engine keys): core.atomicfile's rule."""
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(path, json.dumps(data))

    @staticmethod
    def _read(path: Path) -> Any:
        with contextlib.suppress(OSError, ValueError):
            return json.loads(path.read_text())
        return None

    def save_answer(self, answer: Mapping[str, Any]) -> None:
        self._write(self.answer_file, dict(answer))

    def answer(self) -> dict[str, Any] | None:
        data = self._read(self.answer_file)
        return data if isinstance(data, dict) else None

    def save_usage(self, rows: list[dict[str, Any]]) -> None:
        self._write(self.usage_file, rows)

    def usage(self) -> list[dict[str, Any]]:
        data = self._read(self.usage_file)
        return [row for row in data if isinstance(row, dict)] if isinstance(data, list) else []

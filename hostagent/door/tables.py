"""The panel's serving answer (GET /agent/v1/serving, hostagent/PROTOCOL.md: a
serving.wire.DoorDocument) made into what the front door serves: its RoutingTable, its KeyTable,
its queue and drain limits, and for the loader each model's revision and launch.

Each engine listens on its launch's port (the panel refuses two served revisions on one port; a
table that has them is refused here too), at the host's engine bind address
(CONTROLPANEL_ENGINE_BIND_HOST): the agent builds each upstream from them, and takes the engine's
key, served name, planned memory and label from the launch (the document says each once).

The last answer is kept in <state>/private/serving.json (0600, in a 0700 folder, like the engines'
key files), so an agent restarted while the panel is away serves again at once.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.atomicfile import write_atomic
from hostagent.frontdoor import KeyTable, RoutingTable, ServedModel
from hostagent.frontdoor.table import Mode, TableError
from serving.agent_reports import UsageTotal
from serving.engines.knobs import url_host
from serving.engines.registry import ADAPTERS
from serving.wire import DoorDocument, DoorModel, WireError

from .loader import Served

__all__ = ["ServingSet", "ServingStore", "serving_set"]


@dataclass(frozen=True)
class ServingSet:
    document: DoorDocument = field(repr=False)
    table: RoutingTable
    keys: KeyTable
    served: dict[str, Served] = field(repr=False)
    limits: dict[str, float]  # FrontDoorSettings fields the panel set for this host

    @property
    def version(self) -> str | None:
        return self.document.version or None


def _model(entry: DoorModel, bind_host: str) -> ServedModel:
    """The door's model for one entry of the document: its upstream at this host's engine bind
    address and its launch's port, the engine's key, name, planned memory and label from the launch."""
    launch = entry.launch
    adapter = ADAPTERS.get(launch.engine)
    model = ServedModel(
        name=entry.name,
        upstream=f"http://{url_host(bind_host)}:{launch.port}",
        mode=Mode(entry.mode),
        aliases=entry.aliases,
        upstream_model=launch.served_name,
        api_key=launch.api_key,
        idle_ttl_s=entry.idle_ttl_s,
        memory=dict(launch.memory.devices),
        revision=launch.label,  # told to clients that still call a name this set no longer serves
        engine=adapter.label if adapter is not None else "",
        paths=frozenset(adapter.api_paths) if adapter is not None else None,  # the adapter's fact
        threads=entry.threads,
    )
    model.check()
    return model


def serving_set(answer: object, *, bind_host: str, active_revision: str | None = None) -> ServingSet:
    """The panel's answer (serving.wire.DoorDocument's shape) made into what the door serves.
    Raises TableError (the whole answer refused) when it is not that shape or a model or key
    breaks a rule. The host's active revision is the panel's first model when it is pinned, or the
    one the host's supervisor runs (`active_revision`, its record's): the supervisor's engine,
    which the door never starts."""
    try:
        document = DoorDocument.from_dict(answer)
    except WireError as exc:
        raise TableError(f"the serving answer: {exc}") from exc
    models: list[ServedModel] = []
    served: dict[str, Served] = {}
    ports: dict[int, str] = {}
    for index, entry in enumerate(document.models):
        launch = entry.launch
        if launch.port in ports:
            raise TableError(f"{ports[launch.port]} and {launch.label} both listen on port {launch.port}")
        ports[launch.port] = launch.label
        model = _model(entry, bind_host)
        models.append(model)
        active = (index == 0 and model.mode is Mode.PINNED) or str(launch.id) == active_revision
        served[model.name] = Served(model.name, str(launch.id), launch.label, launch, pinned=active)
    table = RoutingTable(tuple(models))
    try:
        keys = KeyTable.from_dict(document.keys or {"keys": []})
    except (ValueError, KeyError, TypeError) as exc:
        raise TableError(f"the key table: {exc}") from exc
    return ServingSet(document, table, keys, served, document.door.settings())


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

    def save_answer(self, document: DoorDocument) -> None:
        self._write(self.answer_file, document.to_dict())

    def answer(self) -> Any:
        """The kept answer as JSON (serving_set judges it), None when there is none."""
        return self._read(self.answer_file)

    def save_usage(self, rows: Sequence[UsageTotal]) -> None:
        self._write(self.usage_file, [row.to_dict() for row in rows])

    def usage(self) -> list[UsageTotal]:
        """The kept totals; a row that does not read (a torn or foreign file) is left out."""
        data = self._read(self.usage_file)
        rows = []
        for row in data if isinstance(data, list) else ():
            with contextlib.suppress(WireError):
                rows.append(UsageTotal.from_dict(row))
        return rows

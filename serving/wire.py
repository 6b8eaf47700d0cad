"""What the panel sends a host, as typed values: a revision's launch and an operation's order.

- `RevisionLaunch`: one revision as its host runs it: the serving spec (serving.launch), the
  host's copy of the weights, the planner's memory, the served context, and (only in the copy
  sent to the revision's own host) its resolved API key. The host makes the command with
  `serving.launch.launch(launch.spec, its own facts, api_key=launch.api_key)` and nothing else.
- `Order`: what an operation asks of a host: its kind and parameters, the host as the panel
  knows it, the revision it runs and the one it replaces.
- `DoorDocument`: what a host's front door serves (GET /agent/v1/serving): each `DoorModel` with
  its revision's `RevisionLaunch` (which holds the port, the engine's key, the planned memory and
  the served name: the model entry repeats none of them), the inference keys and the door's bounds.

Pure and frozen; each has `to_dict()` (plain JSON) and `from_dict()`, which raises `WireError`
(naming the field) for a body that breaks the shape. hostagent/PROTOCOL.md's tables describe
these fields and a test holds them to it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from serving.errors import FieldError
from serving.launch import RevisionSpec

__all__ = [
    "DoorDocument",
    "DoorLimits",
    "DoorModel",
    "GpuBrief",
    "HostBrief",
    "Order",
    "PlannedMemory",
    "RevisionLaunch",
    "WireError",
]


class WireError(FieldError):
    """A body from the panel that is not what the protocol says; `field` names where."""

    field_default = ""
    field: str


def _mapping(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise WireError(f"{where} is not an object", field=where)
    return data


def _int(data: Mapping[str, Any], name: str, where: str, *, optional: bool = False) -> int | None:
    value = data.get(name)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"{where}.{name} is not a whole number", field=f"{where}.{name}")
    return value


def _str(data: Mapping[str, Any], name: str, where: str, *, optional: bool = False) -> str | None:
    value = data.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise WireError(f"{where}.{name} is not text", field=f"{where}.{name}")
    return value


def _bytes_per_device(data: Any, where: str) -> dict[str, int]:
    values = _mapping(data if data is not None else {}, where)
    out: dict[str, int] = {}
    for device, size in values.items():
        if not isinstance(device, str) or isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise WireError(f"{where}: {device!r} is not a device with a byte count", field=where)
        out[device] = size
    return out


@dataclass(frozen=True)
class PlannedMemory:
    """The planner's figures for one revision on its host (computed once, by the panel)."""

    devices: Mapping[str, int] = field(default_factory=dict)  # bytes per device: "gpu0", ... or "ram"
    weights: int | None = None  # bytes of weights the engine holds
    kv: int | None = None  # bytes of KV cache
    refused: str = ""  # why the planner cannot read the revision ("" when it can; then no bytes)

    def to_dict(self) -> dict[str, Any]:
        return {"devices": dict(self.devices), "weights": self.weights, "kv": self.kv, "refused": self.refused}

    @classmethod
    def from_dict(cls, data: Any, where: str = "memory") -> PlannedMemory:
        data = _mapping(data, where)
        return cls(
            devices=_bytes_per_device(data.get("devices"), f"{where}.devices"),
            weights=_int(data, "weights", where, optional=True),
            kv=_int(data, "kv", where, optional=True),
            refused=_str(data, "refused", where, optional=True) or "",
        )


@dataclass(frozen=True)
class RevisionLaunch:
    """One revision as its host runs it. `api_key` is set only in the copy sent to the revision's
    own host; `error` says why the host must refuse to start it ("" when it may)."""

    id: int
    number: int
    spec: RevisionSpec
    local_weights: str | None = None  # the host's downloaded copy of the model (the engine opens it)
    weights_bytes: int | None = None  # the weights file's imported size (the preflight checks it)
    memory: PlannedMemory = field(default_factory=PlannedMemory)
    served_context: int | None = None  # tokens one request can use (serving.launch.served_context)
    api_key: str | None = field(default=None, repr=False)
    error: str = ""
    served_name: str = ""  # what clients send as "model" and the engine serves (launch().served_name)

    @property
    def label(self) -> str:
        return f"r{self.number}"

    @property
    def engine(self) -> str:
        return self.spec.engine

    @property
    def port(self) -> int:
        return int(self.spec.port)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "number": self.number,
            "spec": self.spec.to_dict(),
            "local_weights": self.local_weights,
            "weights_bytes": self.weights_bytes,
            "memory": self.memory.to_dict(),
            "served_context": self.served_context,
            "api_key": self.api_key,
            "error": self.error,
            "served_name": self.served_name,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "launch") -> RevisionLaunch:
        data = _mapping(data, where)
        spec = _mapping(data.get("spec"), f"{where}.spec")
        try:
            revision_spec = RevisionSpec.from_dict(spec)
        except (TypeError, ValueError) as exc:
            raise WireError(f"{where}.spec: {exc}", field=f"{where}.spec") from exc
        if not isinstance(revision_spec.engine, str) or not revision_spec.engine:
            raise WireError(f"{where}.spec names no engine", field=f"{where}.spec.engine")
        if isinstance(revision_spec.port, bool) or not isinstance(revision_spec.port, int):
            raise WireError(f"{where}.spec.port is not a whole number", field=f"{where}.spec.port")
        return cls(
            id=_int(data, "id", where) or 0,
            number=_int(data, "number", where) or 0,
            spec=revision_spec,
            local_weights=_str(data, "local_weights", where, optional=True) or None,
            weights_bytes=_int(data, "weights_bytes", where, optional=True),
            memory=PlannedMemory.from_dict(data.get("memory") or {}, f"{where}.memory"),
            served_context=_int(data, "served_context", where, optional=True),
            api_key=_str(data, "api_key", where, optional=True) or None,
            error=_str(data, "error", where, optional=True) or "",
            served_name=_str(data, "served_name", where, optional=True) or "",
        )


@dataclass(frozen=True)
class GpuBrief:
    index: int
    name: str


@dataclass(frozen=True)
class HostBrief:
    """The host as the panel knows it, for an operation on it."""

    name: str
    cpu_only: bool = False
    nvml_available: bool = False
    engine_installs: Mapping[str, Any] = field(default_factory=dict)  # as the host reported its installs
    gpus: tuple[GpuBrief, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["engine_installs"] = dict(self.engine_installs)
        values["gpus"] = [dataclasses.asdict(gpu) for gpu in self.gpus]  # a list, as JSON gives it back
        return values

    @classmethod
    def from_dict(cls, data: Any, where: str = "host") -> HostBrief:
        data = _mapping(data, where)
        gpus = data.get("gpus") or []
        if not isinstance(gpus, list):
            raise WireError(f"{where}.gpus is not a list", field=f"{where}.gpus")
        return cls(
            name=_str(data, "name", where) or "",
            cpu_only=bool(data.get("cpu_only")),
            nvml_available=bool(data.get("nvml_available")),
            engine_installs=dict(_mapping(data.get("engine_installs") or {}, f"{where}.engine_installs")),
            gpus=tuple(
                GpuBrief(index=_int(g, "index", f"{where}.gpus") or 0, name=_str(g, "name", f"{where}.gpus") or "")
                for g in (_mapping(g, f"{where}.gpus") for g in gpus)
            ),
        )


@dataclass(frozen=True)
class Order:
    """What an operation asks of its host (POST /agent/v1/operations/<id>/begin answers it)."""

    id: str
    kind: str
    host: HostBrief
    params: Mapping[str, Any] = field(default_factory=dict)
    revision: RevisionLaunch | None = None  # what a switch, launch, rollback or benchmark runs
    previous: RevisionLaunch | None = None  # what a switch or rollback replaces (the host's active revision)
    hub_token: str | None = field(default=None, repr=False)  # a gated download's token, this host's only

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "host": self.host.to_dict(),
            "params": dict(self.params),
            "revision": self.revision.to_dict() if self.revision else None,
            "previous": self.previous.to_dict() if self.previous else None,
            "hub_token": self.hub_token,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Order:
        data = _mapping(data, "order")

        def launch_of(name: str) -> RevisionLaunch | None:
            value = data.get(name)
            return None if value is None else RevisionLaunch.from_dict(value, f"order.{name}")

        return cls(
            id=_str(data, "id", "order") or "",
            kind=_str(data, "kind", "order") or "",
            host=HostBrief.from_dict(data.get("host"), "order.host"),
            params=dict(_mapping(data.get("params") or {}, "order.params")),
            revision=launch_of("revision"),
            previous=launch_of("previous"),
            hub_token=_str(data, "hub_token", "order", optional=True) or None,
        )


MODES = ("pinned", "on-demand")


def _number(data: Mapping[str, Any], name: str, where: str) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise WireError(f"{where}.{name} is not a number of 0 or more", field=f"{where}.{name}")
    return float(value)


@dataclass(frozen=True)
class DoorModel:
    """One model of a host's front door: its door name, how it is served, and its revision's
    launch (the upstream port, the engine's key, the planned memory, the served name, the label)."""

    name: str
    launch: RevisionLaunch
    mode: str = "on-demand"  # "pinned" (kept loaded) | "on-demand" (loaded when a request names it)
    aliases: tuple[str, ...] = ()
    idle_ttl_s: float | None = None  # unloaded after this long idle (None: never)
    threads: int | None = None  # CPU threads its engine computes with on a CPU-only host (None: not counted)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "launch": self.launch.to_dict(),
            "mode": self.mode,
            "aliases": list(self.aliases),
            "idle_ttl_s": self.idle_ttl_s,
            "threads": self.threads,
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "model") -> DoorModel:
        data = _mapping(data, where)
        mode = data.get("mode", "on-demand")
        if mode not in MODES:
            raise WireError(f"{where}.mode is pinned or on-demand, not {mode!r:.40}", field=f"{where}.mode")
        aliases = data.get("aliases") or []
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise WireError(f"{where}.aliases is not a list of names", field=f"{where}.aliases")
        return cls(
            name=_str(data, "name", where) or "",
            launch=RevisionLaunch.from_dict(data.get("launch"), f"{where}.launch"),
            mode=mode,
            aliases=tuple(aliases),
            idle_ttl_s=_number(data, "idle_ttl_s", where),
            threads=_int(data, "threads", where, optional=True),
        )


@dataclass(frozen=True)
class DoorLimits:
    """The door's bounds the panel sets for the host (hostagent.frontdoor.FrontDoorSettings)."""

    max_waiting: int | None = None  # requests that may wait for a model (None: the host's setting)
    max_wait_s: float | None = None
    drain_timeout_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def settings(self) -> dict[str, float]:
        """The bounds the panel set, under FrontDoorSettings' field names (the host's own for the rest)."""
        named = {
            "queue_max": self.max_waiting,
            "queue_wait_s": self.max_wait_s,
            "drain_timeout_s": self.drain_timeout_s,
        }
        return {field: float(value) for field, value in named.items() if value is not None}

    @classmethod
    def from_dict(cls, data: object, where: str = "door") -> DoorLimits:
        data = _mapping(data if data is not None else {}, where)
        waiting = _number(data, "max_waiting", where)
        return cls(
            max_waiting=None if waiting is None else int(waiting),
            max_wait_s=_number(data, "max_wait_s", where),
            drain_timeout_s=_number(data, "drain_timeout_s", where),
        )


@dataclass(frozen=True)
class DoorDocument:
    """What a host's front door serves (GET /agent/v1/serving). `version` is a digest of the rest:
    the agent sends it back (If-None-Match) and gets 304 while nothing changed. `keys` is the
    inference key table (hostagent.frontdoor.keys.KeyTable's shape); `engine_installs` the
    host's installs as it reported them (where an on-demand load finds its engine)."""

    version: str
    models: tuple[DoorModel, ...] = ()
    keys: Mapping[str, Any] = field(default_factory=dict)
    door: DoorLimits = field(default_factory=DoorLimits)
    engine_installs: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "models": [m.to_dict() for m in self.models],
            "keys": dict(self.keys),
            "door": self.door.to_dict(),
            "engine_installs": dict(self.engine_installs),
        }

    @classmethod
    def from_dict(cls, data: object) -> DoorDocument:
        data = _mapping(data, "document")
        models = data.get("models")
        if not isinstance(models, list):
            raise WireError('the document has no "models" list', field="document.models")
        return cls(
            version=_str(data, "version", "document", optional=True) or "",
            models=tuple(DoorModel.from_dict(m, f"document.models[{i}]") for i, m in enumerate(models)),
            keys=dict(_mapping(data.get("keys") or {}, "document.keys")),
            door=DoorLimits.from_dict(data.get("door"), "document.door"),
            engine_installs=dict(_mapping(data.get("engine_installs") or {}, "document.engine_installs")),
        )

"""What a host's agent sends the panel, as typed values (serving/wire.py holds what the panel sends).

One frozen dataclass per body of the agent API (hostagent/PROTOCOL.md, "What the agent sends,
typed"): the agent builds them (hostagent.panel.HttpPanel posts `to_dict()`), the panel reads
them with `from_dict()` (deployments.agent_api.bodies, after its bounds), which raises
`WireError` naming the field for a body that breaks the shape. Absent optional fields read as
their defaults, as the panel always took them.

`facts`, `inventory`, an engine state and samples stay JSON objects here: their shapes are the
host's probes' (hostagent.probes.host.HostFacts, hostagent.probes.nvml.GpuInventory and
GpuSample, hostagent.probes.host_usage.HostUsage, hostagent.local.engine_state), and the panel
checks them field by field (deployments.agent_api.bodies).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from serving.wire import WireError, _int, _mapping, _str

__all__ = [
    "DoorModelState",
    "DoorReport",
    "EngineLogChunk",
    "EngineMemory",
    "EngineRun",
    "Heartbeat",
    "Hello",
    "HostProbe",
    "InstallDetails",
    "InstallRecord",
    "MemoryReport",
    "OperationEnd",
    "OperationProgress",
    "OutsideMemory",
    "ProbeAnswer",
    "Registered",
    "Registration",
    "Restore",
    "TableRefusal",
    "Telemetry",
    "UsageTotal",
    "WatchdogEvent",
]

JsonObject = Mapping[str, Any]  # a JSON object whose shape another module owns (named where it is used)


def _object(data: Mapping[str, Any], name: str, where: str) -> dict[str, Any]:
    """An optional JSON object field; {} when absent."""
    value = data.get(name)
    return dict(_mapping(value, f"{where}.{name}")) if value is not None else {}


def _objects(data: Mapping[str, Any], name: str, where: str) -> tuple[dict[str, Any], ...]:
    """An optional list of JSON objects; () when absent."""
    value = data.get(name)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise WireError(f"{where}.{name} is not a list", field=f"{where}.{name}")
    return tuple(dict(_mapping(item, f"{where}.{name}[{n}]")) for n, item in enumerate(value))


def _real(data: Mapping[str, Any], name: str, where: str) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError(f"{where}.{name} is not a number", field=f"{where}.{name}")
    return value


def _sizes(data: Mapping[str, Any], name: str, where: str) -> dict[str, int]:
    """Bytes per device ({"gpu0": n, "ram": n}); {} when absent."""
    sizes = _object(data, name, where)
    for device, size in sizes.items():
        if isinstance(size, bool) or not isinstance(size, int):
            raise WireError(f"{where}.{name}.{device} is not a byte count", field=f"{where}.{name}")
    return sizes


def _texts(data: Mapping[str, Any], name: str, where: str) -> tuple[str, ...]:
    value = data.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise WireError(f"{where}.{name} is not a list of text", field=f"{where}.{name}")
    return tuple(value)


class _Plain:
    """A value of plain fields (text, numbers, None): its JSON is its fields as they are."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(cast(Any, self))


# --- register, probe, heartbeat -----------------------------------------------------------------


@dataclass(frozen=True)
class HostProbe:
    """POST probe: what the host measured of itself (hostagent.probe.probe_local)."""

    facts: JsonObject  # HostFacts.to_dict() with address, model_dirs, install_dirs, cached_builds
    inventory: JsonObject  # GpuInventory.to_dict()

    def to_dict(self) -> dict[str, Any]:
        return {"facts": dict(self.facts), "inventory": dict(self.inventory)}

    @classmethod
    def from_dict(cls, data: object) -> HostProbe:
        data = _mapping(data, "probe")
        return cls(facts=_object(data, "facts", "probe"), inventory=_object(data, "inventory", "probe"))


@dataclass(frozen=True)
class Registration:
    """POST register: the probe and the engine's state when the agent starts."""

    facts: JsonObject
    inventory: JsonObject
    engine_state: JsonObject  # hostagent.local.engine_state

    def to_dict(self) -> dict[str, Any]:
        return {"facts": dict(self.facts), "inventory": dict(self.inventory), "engine_state": dict(self.engine_state)}

    @classmethod
    def from_dict(cls, data: object) -> Registration:
        data = _mapping(data, "register")
        return cls(
            facts=_object(data, "facts", "register"),
            inventory=_object(data, "inventory", "register"),
            engine_state=_object(data, "engine_state", "register"),
        )


@dataclass(frozen=True)
class Heartbeat:
    """POST heartbeat: liveness, the engine's state and its metrics now (None: none read), and
    the engine builds in the host's pip cache now (None: not read; the probe's shape, {"llama.cpp":
    ["b11434", ...]}), so the install form offers a wheel that landed since the probe."""

    engine_state: JsonObject
    engine_metrics: Mapping[str, float | None] | None = None  # serving.engines' common metric names
    cached_builds: JsonObject | None = None

    def to_dict(self) -> dict[str, Any]:
        metrics = dict(self.engine_metrics) if self.engine_metrics is not None else None
        cached = dict(self.cached_builds) if self.cached_builds is not None else None
        return {"engine_state": dict(self.engine_state), "engine_metrics": metrics, "cached_builds": cached}

    @classmethod
    def from_dict(cls, data: object) -> Heartbeat:
        data = _mapping(data, "heartbeat")
        metrics, cached = data.get("engine_metrics"), data.get("cached_builds")
        return cls(
            engine_state=_object(data, "engine_state", "heartbeat"),
            engine_metrics=None if metrics is None else _object(data, "engine_metrics", "heartbeat"),
            cached_builds=None if cached is None else _object(data, "cached_builds", "heartbeat"),
        )


# --- telemetry ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineMemory:
    """What one engine the panel started holds: bytes per device ("gpuN" or "ram")."""

    revision_id: str
    devices: Mapping[str, int]

    def to_dict(self) -> dict[str, Any]:
        return {"revision_id": self.revision_id, "devices": dict(self.devices)}

    @classmethod
    def from_dict(cls, data: object, where: str = "engine") -> EngineMemory:
        data = _mapping(data, where)
        revision_id = data.get("revision_id")
        if isinstance(revision_id, bool) or not isinstance(revision_id, int | str):
            raise WireError(f"{where}.revision_id is not a revision's id", field=f"{where}.revision_id")
        return cls(revision_id=str(revision_id), devices=_sizes(data, "devices", where))


@dataclass(frozen=True)
class OutsideMemory(_Plain):
    """GPU memory of a process the panel did not start."""

    pid: int
    name: str
    gpu: int
    bytes: int

    @classmethod
    def from_dict(cls, data: object, where: str = "outside") -> OutsideMemory:
        data = _mapping(data, where)
        return cls(
            pid=_int(data, "pid", where) or 0,
            name=_str(data, "name", where) or "",
            gpu=_int(data, "gpu", where) or 0,
            bytes=_int(data, "bytes", where) or 0,
        )


@dataclass(frozen=True)
class MemoryReport:
    """What each engine the panel started holds, and what other processes hold on the GPUs
    (hostagent.held.memory_report)."""

    ts: float | None
    engines: tuple[EngineMemory, ...] = ()
    outside: tuple[OutsideMemory, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "engines": [e.to_dict() for e in self.engines],
            "outside": [o.to_dict() for o in self.outside],
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "memory") -> MemoryReport:
        data = _mapping(data, where)
        return cls(
            ts=_real(data, "ts", where),
            engines=tuple(
                EngineMemory.from_dict(e, f"{where}.engines[{n}]")
                for n, e in enumerate(_objects(data, "engines", where))
            ),
            outside=tuple(
                OutsideMemory.from_dict(o, f"{where}.outside[{n}]")
                for n, o in enumerate(_objects(data, "outside", where))
            ),
        )


@dataclass(frozen=True)
class Telemetry:
    """POST telemetry: samples measured since the last report, and what each engine holds now."""

    gpu_samples: Sequence[JsonObject] = ()  # hostagent.probes.nvml.GpuSample.to_dict() each
    engine_samples: Sequence[JsonObject] = ()  # {"ts": seconds, **the engine's metrics} each
    host_samples: Sequence[JsonObject] = ()  # hostagent.probes.host_usage.HostUsage.to_dict() each
    memory: MemoryReport | None = None

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "gpu_samples": [dict(s) for s in self.gpu_samples],
            "engine_samples": [dict(s) for s in self.engine_samples],
            "host_samples": [dict(s) for s in self.host_samples],
        }
        if self.memory is not None:
            body["memory"] = self.memory.to_dict()
        return body

    @classmethod
    def from_dict(cls, data: object) -> Telemetry:
        data = _mapping(data, "telemetry")
        memory = data.get("memory")
        return cls(
            gpu_samples=_objects(data, "gpu_samples", "telemetry"),
            engine_samples=_objects(data, "engine_samples", "telemetry"),
            host_samples=_objects(data, "host_samples", "telemetry"),
            memory=None if memory is None else MemoryReport.from_dict(memory, "memory"),
        )


@dataclass(frozen=True)
class WatchdogEvent(_Plain):
    """POST events: what the host's watchdog did (restarted, restart_failed, gave_up)."""

    kind: str
    message: str = ""

    @classmethod
    def from_dict(cls, data: object) -> WatchdogEvent:
        data = _mapping(data, "event")
        return cls(kind=_str(data, "kind", "event") or "", message=_str(data, "message", "event", optional=True) or "")


# --- the engine's log ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineRun(_Plain):
    """One start of an engine, whose log lines an EngineLogChunk carries."""

    key: str  # "<started_at>|<pid>" (hostagent.enginelog.run_key)
    engine: str | None = None
    revision_id: str | None = None
    revision_label: str | None = None
    started_at: str | None = None  # ISO 8601

    @classmethod
    def from_dict(cls, data: object, where: str = "run") -> EngineRun:
        data = _mapping(data, where)
        revision_id = data.get("revision_id")
        if revision_id is not None and (isinstance(revision_id, bool) or not isinstance(revision_id, int | str)):
            raise WireError(f"{where}.revision_id is not a revision's id", field=f"{where}.revision_id")
        return cls(
            key=_str(data, "key", where) or "",
            engine=_str(data, "engine", where, optional=True),
            revision_id=None if revision_id is None else str(revision_id),
            revision_label=_str(data, "revision_label", where, optional=True),
            started_at=_str(data, "started_at", where, optional=True) or None,
        )


@dataclass(frozen=True)
class EngineLogChunk:
    """POST engine-log: whole lines of one run's log, bytes offset..end of the host's file."""

    run: EngineRun
    offset: int
    end: int
    lines: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run.to_dict(), "offset": self.offset, "end": self.end, "lines": list(self.lines)}

    @classmethod
    def from_dict(cls, data: object) -> EngineLogChunk:
        data = _mapping(data, "engine-log")
        return cls(
            run=EngineRun.from_dict(data.get("run")),
            offset=_int(data, "offset", "engine-log") or 0,
            end=_int(data, "end", "engine-log") or 0,
            lines=_texts(data, "lines", "engine-log"),
        )


# --- operations ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class OperationProgress(_Plain):
    """POST operations/<id>/progress: stage, fraction done (0 to 1), log lines; all optional."""

    stage: str | None = None
    progress: float | None = None
    log: str | None = None

    @classmethod
    def from_dict(cls, data: object) -> OperationProgress:
        data = _mapping(data, "progress")
        return cls(
            stage=_str(data, "stage", "progress", optional=True),
            progress=_real(data, "progress", "progress"),
            log=_str(data, "log", "progress", optional=True),
        )


def _versions(data: Mapping[str, Any], name: str, where: str) -> dict[str, str | None] | None:
    """{distribution: version, or None where the venv has none}; None when absent."""
    value = data.get(name)
    if value is None:
        return None
    read = dict(_mapping(value, f"{where}.{name}"))
    if not all(isinstance(version, str | None) for version in read.values()):
        raise WireError(f"{where}.{name} is not a map of versions", field=f"{where}.{name}")
    return read


@dataclass(frozen=True)
class InstallDetails:
    """What the host read back of an install (kept in the host's install entry, beside its path):
    the engine's Python distribution in the venv and its version, the planner's packages of the
    venv (`packages`: serving.engines.registry.venv_packages; None: not read), the source folder
    a build was made from, and whether the venv was already there (`adopted`, engine install
    --existing). Only the fields there are go on the wire, as the entry keeps them."""

    distribution: str = ""
    package_version: str = ""
    packages: Mapping[str, str | None] | None = None
    source_dir: str = ""
    adopted: bool = False

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.distribution:
            body.update(distribution=self.distribution, package_version=self.package_version)
        if self.packages is not None:
            body["packages"] = dict(self.packages)
        if self.source_dir:
            body["source_dir"] = self.source_dir
        if self.adopted:
            body["adopted"] = True
        return body

    @classmethod
    def from_dict(cls, data: object) -> InstallDetails:
        data, where = _mapping(data, "install.details"), "install.details"
        texts = {name: _str(data, name, where, optional=True) or "" for name in _INSTALL_TEXTS}
        return cls(**texts, packages=_versions(data, "packages", where), adopted=data.get("adopted") is True)


_INSTALL_TEXTS = ("distribution", "package_version", "source_dir")  # InstallDetails' text fields


@dataclass(frozen=True)
class InstallRecord:
    """An install's end (OperationEnd.install): `engine` at `version` (as its adapter spells it;
    "" when the latest was installed and no version could be read back) is in `path`, runs
    `binary` ("" for an engine installed system-wide), with `details`. The panel records it as
    the host's install (deployments.services.installs.install_record)."""

    engine: str
    version: str = ""
    path: str = ""
    binary: str = ""
    details: InstallDetails = InstallDetails()

    def to_dict(self) -> dict[str, Any]:
        return {**{name: getattr(self, name) for name in _RECORD_TEXTS}, "details": self.details.to_dict()}

    @classmethod
    def from_dict(cls, data: object) -> InstallRecord:
        data = _mapping(data, "install")
        details = data.get("details")
        texts = {name: _str(data, name, "install", optional=name != "engine") or "" for name in _RECORD_TEXTS}
        return cls(**texts, details=InstallDetails.from_dict(details) if details is not None else InstallDetails())


_RECORD_TEXTS = ("engine", "version", "path", "binary")  # InstallRecord's text fields


@dataclass(frozen=True)
class OperationEnd:
    """POST operations/<id>/finish: how an operation ended. `benchmark` (a benchmark's figures)
    and `install` (an install's record) are sent only when there are."""

    state: str  # succeeded, failed, cancelled
    result: JsonObject = field(default_factory=dict)
    error: str = ""
    benchmark: JsonObject | None = None
    install: InstallRecord | None = None

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"state": self.state, "result": dict(self.result), "error": self.error}
        if self.benchmark is not None:
            body["benchmark"] = dict(self.benchmark)
        if self.install is not None:
            body["install"] = self.install.to_dict()
        return body

    @classmethod
    def from_dict(cls, data: object) -> OperationEnd:
        data = _mapping(data, "finish")
        return cls(
            state=_str(data, "state", "finish") or "",
            result=_object(data, "result", "finish"),
            error=_str(data, "error", "finish", optional=True) or "",
            benchmark=None if data.get("benchmark") is None else _object(data, "benchmark", "finish"),
            install=None if data.get("install") is None else InstallRecord.from_dict(data["install"]),
        )


# --- the front door's report --------------------------------------------------------------------


@dataclass(frozen=True)
class DoorModelState:
    """One model of the front door as it stands (hostagent.frontdoor.scheduler's state row), and
    what its engine holds as the host measured it (`measured`, bytes per device)."""

    name: str
    aliases: tuple[str, ...] = ()
    mode: str | None = None
    phase: str | None = None
    in_flight: int | None = None
    waiting: int | None = None
    idle_s: float | None = None
    last_load_s: float | None = None
    memory: Mapping[str, int] = field(default_factory=dict)
    removed: bool = False
    measured: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "aliases": list(self.aliases),
            "mode": self.mode,
            "phase": self.phase,
            "in_flight": self.in_flight,
            "waiting": self.waiting,
            "idle_s": self.idle_s,
            "last_load_s": self.last_load_s,
            "memory": dict(self.memory),
            "removed": self.removed,
            "measured": dict(self.measured),
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "state") -> DoorModelState:
        data = _mapping(data, where)
        return cls(
            name=_str(data, "name", where) or "",
            aliases=_texts(data, "aliases", where),
            mode=_str(data, "mode", where, optional=True),
            phase=_str(data, "phase", where, optional=True),
            in_flight=_int(data, "in_flight", where, optional=True),
            waiting=_int(data, "waiting", where, optional=True),
            idle_s=_real(data, "idle_s", where),
            last_load_s=_real(data, "last_load_s", where),
            memory=_sizes(data, "memory", where),
            removed=bool(data.get("removed")),
            measured=_sizes(data, "measured", where),
        )


USAGE_COUNTS = ("requests", "prompt_tokens", "completion_tokens", "errors")


@dataclass(frozen=True)
class UsageTotal(_Plain):
    """A running total of one UTC day of one key on one model (hostagent.frontdoor.usage)."""

    day: str  # YYYY-MM-DD
    key: str  # the inference key's name, "" on an open door
    model: str  # the door's name of the model
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0

    @classmethod
    def from_dict(cls, data: object, where: str = "usage") -> UsageTotal:
        data = _mapping(data, where)
        counts = {name: _int({name: data.get(name, 0)}, name, where) or 0 for name in USAGE_COUNTS}
        return cls(
            day=_str(data, "day", where) or "",
            key=_str(data, "key", where, optional=True) or "",
            model=_str(data, "model", where) or "",
            **counts,
        )


@dataclass(frozen=True)
class TableRefusal(_Plain):
    """The panel's serving table the door refused (it keeps serving its previous one)."""

    version: str
    reason: str

    @classmethod
    def from_dict(cls, data: object, where: str = "refused") -> TableRefusal:
        data = _mapping(data, where)
        return cls(version=_str(data, "version", where, optional=True) or "", reason=_str(data, "reason", where) or "")


@dataclass(frozen=True)
class DoorReport:
    """POST serving/report: the front door's state, its usage totals, and the table it refuses."""

    version: str | None = None  # the version of the panel's document the door serves (None: none yet)
    bind: str = ""
    state: tuple[DoorModelState, ...] = ()
    usage: tuple[UsageTotal, ...] = ()
    refused: TableRefusal | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "bind": self.bind,
            "state": [row.to_dict() for row in self.state],
            "usage": [row.to_dict() for row in self.usage],
            "refused": self.refused.to_dict() if self.refused else None,
        }

    @classmethod
    def from_dict(cls, data: object) -> DoorReport:
        data = _mapping(data, "report")
        refused = data.get("refused")
        return cls(
            version=_str(data, "version", "report", optional=True),
            bind=_str(data, "bind", "report", optional=True) or "",
            state=tuple(
                DoorModelState.from_dict(r, f"state[{n}]") for n, r in enumerate(_objects(data, "state", "report"))
            ),
            usage=tuple(
                UsageTotal.from_dict(r, f"usage[{n}]") for n, r in enumerate(_objects(data, "usage", "report"))
            ),
            refused=None if refused is None else TableRefusal.from_dict(refused),
        )


# --- the panel's answers to them ----------------------------------------------------------------


@dataclass(frozen=True)
class Hello(_Plain):
    """GET hello: which host the token is, and the broker queue its operations come on."""

    host: str
    queue: str

    @classmethod
    def from_dict(cls, data: object) -> Hello:
        data = _mapping(data, "hello")
        return cls(
            host=_str(data, "host", "hello", optional=True) or "",
            queue=_str(data, "queue", "hello", optional=True) or "",
        )


@dataclass(frozen=True)
class ProbeAnswer:
    """POST probe's answer: how many GPUs the panel recorded, and where the probe disagrees with
    what the host was declared with."""

    gpus: int = 0
    mismatches: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": self.gpus, "mismatches": list(self.mismatches)}

    @classmethod
    def from_dict(cls, data: object, where: str = "probe") -> ProbeAnswer:
        data = _mapping(data, where)
        return cls(gpus=_int(data, "gpus", where, optional=True) or 0, mismatches=_texts(data, "mismatches", where))


@dataclass(frozen=True)
class Restore(_Plain):
    """A start of the host's active revision the panel queued at register (nothing ran)."""

    operation: str
    revision: int  # the revision's number
    revision_id: str

    @classmethod
    def from_dict(cls, data: object, where: str = "restore") -> Restore:
        data = _mapping(data, where)
        return cls(
            operation=_str(data, "operation", where) or "",
            revision=_int(data, "revision", where) or 0,
            revision_id=_str(data, "revision_id", where) or "",
        )


@dataclass(frozen=True)
class Registered:
    """POST register's answer: the host's name and queue, the probe's answer, the operations its
    previous run left running (now `lost`), the start the panel queued (`restore`), if any, and
    the host's engine installs as the panel recorded them (HostBrief's: where each engine version's
    executable is, for what the agent starts before any order reaches it: its watchdog's restart,
    its door's loads)."""

    host: str = ""
    queue: str = ""
    gpus: int = 0
    mismatches: tuple[str, ...] = ()
    lost: tuple[str, ...] = ()
    restore: Restore | None = None
    engine_installs: JsonObject = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "queue": self.queue,
            "gpus": self.gpus,
            "mismatches": list(self.mismatches),
            "lost": list(self.lost),
            "restore": self.restore.to_dict() if self.restore else None,
            "engine_installs": dict(self.engine_installs),
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "register") -> Registered:
        data = _mapping(data, where)
        restore = data.get("restore")
        return cls(
            host=_str(data, "host", where, optional=True) or "",
            queue=_str(data, "queue", where, optional=True) or "",
            gpus=_int(data, "gpus", where, optional=True) or 0,
            mismatches=_texts(data, "mismatches", where),
            lost=_texts(data, "lost", where),
            restore=None if restore is None else Restore.from_dict(restore, f"{where}.restore"),
            engine_installs=_object(data, "engine_installs", where),
        )

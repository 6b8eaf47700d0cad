"""What a host's agent may send: every agent API body is parsed and checked here, before any
service sees it.

A GPU host is trusted with its own business, not with the panel's uptime: whatever it sends,
the answer is a 200 or a 400 that says what was wrong, never a 500, and nothing is stored from
a refused report. So the parser refuses NaN and Infinity (Python's json reads them; PostgreSQL's
jsonb and every page's arithmetic do not) and nesting deeper than MAX_DEPTH (deep enough
JSON is a RecursionError), and each endpoint's checker below bounds every field it passes on:
times within [2000, now + a day], counts and sizes non-negative and bounded, text bounded and
free of NUL, lists bounded (GPUs per host, samples, metrics, log lines), an operation's result
at most RESULT_BYTES encoded. The checks build on `serving.safety` (the same rules as for
what users send) and raise ValidationError, which the views answer with 400. Each endpoint's
checker answers the body as its typed value (serving.agent_reports), read with `from_dict`
once the bounds hold: the services take those values, not the agent's JSON.

The limits are module constants: they bound what a well-behaved agent never comes near
(hostagent's own reports are far smaller), so no deployment has a reason to change them.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any, Protocol, TypeVar

from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from deployments.choices import OperationState
from deployments.services.host_reports import MAX_SAMPLES, WATCHDOG_EVENTS
from hardware.services import MAX_GPU_INDEX, MAX_GPUS_PER_HOST
from serving.agent_reports import (
    USAGE_COUNTS,
    DoorReport,
    EngineLogChunk,
    Heartbeat,
    HostProbe,
    OperationEnd,
    OperationProgress,
    Registration,
    Telemetry,
    WatchdogEvent,
)
from serving.host_events import REASON_CHARS as HOST_EVENT_REASON_CHARS
from serving.host_events import HostEventReport
from serving.safety import UnsafeValueError, check_json_value, check_text_value
from serving.wire import WireError

MAX_DEPTH = 16  # the deepest real body (a benchmark's levels, requests, fields) is 5
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)  # no GPU host's clock is right before this
AHEAD = timedelta(days=1)  # a host clock this far ahead of the panel's is wrong, not early
MAX_METRICS = 64  # named values in one engine metrics report (the common shape has 9)
MAX_STATE_BYTES = 64 * 1024  # the engine state a heartbeat reports, encoded
RESULT_BYTES = 1024 * 1024  # an operation's result, encoded: a benchmark's raw timings go apart
BENCHMARK_BYTES = 24 * 1024 * 1024  # a benchmark's figures with every request's timings
PROGRESS_LOG_CHARS = 64 * 1024  # log sent with one progress report (its tail is kept; an operation keeps 200,000)
MAX_TEXT = 2000  # a name, a version, a reason, a message
MAX_ERROR = 5000  # an operation's error text (deployments.services.operations keeps as much)
BIG = 2**62  # bytes, counters, millijoules: far beyond any real one, within a bigint
MAX_CORES = 1 << 20
MAX_GPU_BYTES = 1 << 50  # a PiB of memory on one GPU
MAX_WATTS = 100_000.0
MAX_MHZ = 100_000.0
FINISHING = (OperationState.SUCCEEDED, OperationState.FAILED, OperationState.CANCELLED)


# --- the body as a whole ------------------------------------------------------------------------


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number: report a missing reading as null.")


def parse_body(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object: no NaN or Infinity, nested at most MAX_DEPTH deep.
    ValidationError saying what is wrong otherwise."""
    try:
        # 1e999 reads as infinity: every number kept is checked finite below (`number`, `json_value`)
        data = json.loads(raw or b"{}", parse_constant=_no_constant)
    except RecursionError:
        raise ValidationError(f"The body is nested too deeply (at most {MAX_DEPTH} levels).") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValidationError(f"The body is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise ValidationError("The body must be a JSON object.")
    _depth(data)
    return data


def _depth(data: object) -> None:
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValidationError(f"The body is nested too deeply (at most {MAX_DEPTH} levels).")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, dict | list))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, dict | list))


class _Report(Protocol):
    @classmethod
    def from_dict(cls, data: Any) -> Any: ...


Report = TypeVar("Report", bound=_Report)


def typed(kind: type[Report], checked: dict[str, Any]) -> Report:
    """The checked body as its typed value; a shape the checks let through and the type does not
    take is a ValidationError too (naming the field), never a 500."""
    try:
        return kind.from_dict(checked)  # type: ignore[no-any-return]
    except WireError as exc:
        raise ValidationError(str(exc)) from None


# --- fields -------------------------------------------------------------------------------------


def obj(value: object, field: str, *, optional: bool = True) -> dict[str, Any]:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise ValidationError(f"{field} must be a JSON object.")
    return value


def seq(value: object, field: str, *, most: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationError(f"{field} must be a JSON list.")
    if len(value) > most:
        raise ValidationError(f"{field} holds {len(value):,} items; at most {most:,} are taken.")
    return value


def text(
    value: object, field: str, *, most: int = MAX_TEXT, optional: bool = True, one_line: bool = True
) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be text.")
    try:
        check_text_value(value, field=field, max_len=most)
    except UnsafeValueError as exc:
        raise ValidationError(str(exc)) from None
    if one_line and any(c in value for c in "\n\r"):
        raise ValidationError(f"{field} must be one line.")
    return value


def log_text(value: object, field: str, *, keep: int) -> str:
    """Text that reports what happened (a log, an error, a message): kept, not refused, for the
    agent would only send it again. Its last `keep` characters, after a line saying how many were
    cut; NUL and lone surrogates (PostgreSQL stores neither) replaced."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be text.")
    if len(value) > keep:
        cut = len(value) - keep
        value = f"[… {cut:,} characters of this report's {field} were cut …]\n" + value[cut:]
    return value.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def number(
    value: object, field: str, *, low: float = 0, high: float = BIG, optional: bool = True, whole: bool = False
) -> Any:
    """A finite int (or float unless `whole`) in [low, high]; None when optional and absent."""
    if value is None and optional:
        return None
    kinds = int if whole else int | float
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ValidationError(f"{field} must be a {'whole ' if whole else ''}number, not {_show(value)}.")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationError(f"{field} must be a finite number.")
    if not low <= value <= high:
        raise ValidationError(f"{field} is out of range ({low:g} to {high:g}): {_show(value)}.")
    return value


def _window() -> tuple[datetime, datetime]:
    return EARLIEST, timezone.now() + AHEAD


def epoch(value: object, field: str) -> datetime | None:
    """Seconds since 1970 as a time within [2000, now + a day]; None when absent."""
    if value is None:
        return None
    low, high = _window()
    seconds = number(value, field, low=low.timestamp(), high=high.timestamp())
    return datetime.fromtimestamp(seconds, tz=UTC)


def iso_time(value: object, field: str) -> datetime | None:
    """An ISO 8601 time within [2000, now + a day]; None when absent or empty."""
    if value in (None, ""):
        return None
    raw = text(value, field, most=64)
    try:
        when = parse_datetime(raw or "")
    except ValueError:  # well formed but no such time (month 13)
        when = None
    if when is None:
        raise ValidationError(f"{field} must be an ISO 8601 time.")
    if timezone.is_naive(when):
        when = timezone.make_aware(when, UTC)
    low, high = _window()
    if not low <= when <= high:
        raise ValidationError(f"{field} must lie between 2000 and a day from now, not {raw}.")
    return when


def json_value(value: object, field: str, *, most_bytes: int) -> Any:
    """Plain JSON (keys text, no NUL, finite 64-bit numbers) of at most `most_bytes` encoded."""
    try:
        check_json_value(value, field=field, max_items=1_000_000, max_depth=MAX_DEPTH, max_text=most_bytes)
    except UnsafeValueError as exc:
        raise ValidationError(str(exc)) from None
    size = len(json.dumps(value, ensure_ascii=False).encode())
    if size > most_bytes:
        raise ValidationError(f"{field} is {size:,} bytes; at most {most_bytes:,} are stored.")
    return value


def _show(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:40] + "…"


# --- register and probe -------------------------------------------------------------------------

FACT_TEXT = {
    "address": 255,
    "hostname": 255,
    "os_name": 200,
    "kernel": 100,
    "architecture": 40,
    "cpu_model": 200,
    "python_version": 40,
}
FACT_COUNTS = {"cpu_logical_cores": MAX_CORES, "cpu_physical_cores": MAX_CORES, "cpu_usable_cores": MAX_CORES}


def facts(value: object) -> dict[str, Any]:
    """`hostagent.probes.host.HostFacts.to_dict()` plus `address` and `model_dirs`."""
    data = obj(value, "facts")
    for key, most in FACT_TEXT.items():
        text(data.get(key), f"facts.{key}", most=most)
    for key, most in FACT_COUNTS.items():
        number(data.get(key), f"facts.{key}", low=1, high=most, whole=True)
    number(data.get("memory_total_bytes"), "facts.memory_total_bytes", whole=True)
    if data.get("model_dirs") is not None:
        seq(data["model_dirs"], "facts.model_dirs", most=32)  # hardware.services.clean_model_dirs checks each
    return data


P2P_KEYS = ("read", "write", "nvlink", "atomics")


def inventory(value: object) -> dict[str, Any]:
    """`hostagent.probes.nvml.GpuInventory.to_dict()`: at most MAX_GPUS_PER_HOST GPUs, each
    with a distinct index, and the pairs between them."""
    data = obj(value, "inventory")
    if data.get("available") is not None and not isinstance(data["available"], bool):
        raise ValidationError("inventory.available must be true or false.")
    text(data.get("reason"), "inventory.reason", one_line=False)
    for key, most in (("driver_version", 40), ("cuda_driver_version", 20), ("nvml_version", 40)):
        text(data.get(key), f"inventory.{key}", most=most)
    gpus = seq(data.get("gpus"), "inventory.gpus", most=MAX_GPUS_PER_HOST)
    seen: set[int] = set()
    for n, gpu in enumerate(gpus):
        where = f"inventory.gpus[{n}]"
        gpu = obj(gpu, where, optional=False)
        index = number(gpu.get("index"), f"{where}.index", high=MAX_GPU_INDEX, optional=False, whole=True)
        if index in seen:
            raise ValidationError(f"{where}.index {index} is reported twice.")
        seen.add(index)
        if not text(gpu.get("name"), f"{where}.name", most=100, optional=False):
            raise ValidationError(f"{where}.name must not be empty.")
        text(gpu.get("uuid"), f"{where}.uuid", most=80)
        for key in ("pci_bus_id", "serial", "brand", "architecture"):
            text(gpu.get(key), f"{where}.{key}", most=100)
        number(gpu.get("memory_total_bytes"), f"{where}.memory_total_bytes", high=MAX_GPU_BYTES, optional=False)
        number(gpu.get("power_limit_w"), f"{where}.power_limit_w", high=MAX_WATTS)
        number(gpu.get("nvlink_active_links"), f"{where}.nvlink_active_links", high=64, whole=True)
        capability = gpu.get("compute_capability")
        if capability is not None:
            parts = seq(capability, f"{where}.compute_capability", most=2)
            if len(parts) != 2:
                raise ValidationError(f"{where}.compute_capability must be [major, minor].")
            for part in parts:
                number(part, f"{where}.compute_capability", high=99, optional=False, whole=True)
        pcie = obj(gpu.get("pcie"), f"{where}.pcie")
        for key in ("current_generation", "max_generation", "current_width", "max_width"):
            number(pcie.get(key), f"{where}.pcie.{key}", high=64, whole=True)
    pairs = seq(data.get("pairs"), "inventory.pairs", most=max(len(seen) * (len(seen) - 1) // 2, 0))
    for n, pair in enumerate(pairs):
        where = f"inventory.pairs[{n}]"
        pair = obj(pair, where, optional=False)
        a, b = pair.get("a"), pair.get("b")
        if a not in seen or b not in seen or a == b or isinstance(a, bool) or isinstance(b, bool):
            raise ValidationError(f"{where} must name two different GPUs of this report.")
        text(pair.get("topology"), f"{where}.topology", most=40)
        p2p = obj(pair.get("p2p"), f"{where}.p2p")
        if set(p2p) - set(P2P_KEYS):
            raise ValidationError(f"{where}.p2p holds only {', '.join(P2P_KEYS)}.")
        for key in P2P_KEYS:
            text(p2p.get(key), f"{where}.p2p.{key}", most=40)
    return data


def engine_state(value: object) -> dict[str, Any]:
    """What the host's engine is doing, as its agent sees it (stored and shown as reported)."""
    return json_value(obj(value, "engine_state"), "engine_state", most_bytes=MAX_STATE_BYTES)


def host_probe(body: dict[str, Any]) -> HostProbe:
    """POST probe: the host's facts and GPU inventory, checked."""
    return typed(HostProbe, {"facts": facts(body.get("facts")), "inventory": inventory(body.get("inventory"))})


def registration(body: dict[str, Any]) -> Registration:
    """POST register: the probe and the engine's state, checked."""
    checked = {
        "facts": facts(body.get("facts")),
        "inventory": inventory(body.get("inventory")),
        "engine_state": engine_state(body.get("engine_state")),
    }
    return typed(Registration, checked)


def heartbeat(body: dict[str, Any]) -> Heartbeat:
    """POST heartbeat: the engine's state and its metrics, checked; the pip cache's builds an
    object or absent (hardware.services.clean_cached_builds keeps what reads as a build)."""
    cached = body.get("cached_builds")
    checked = {
        "engine_state": engine_state(body.get("engine_state")),
        "engine_metrics": engine_metrics(body.get("engine_metrics")),
        "cached_builds": None if cached is None else obj(cached, "cached_builds"),
    }
    return typed(Heartbeat, checked)


# --- heartbeat and telemetry --------------------------------------------------------------------


def engine_metrics(value: object, field: str = "engine_metrics") -> dict[str, Any] | None:
    """The engine's metrics in the common shape: at most MAX_METRICS names, each value null or a
    finite number, 0 or more (gauges, ratios and counters alike)."""
    if value is None:
        return None
    data = obj(value, field)
    if len(data) > MAX_METRICS:
        raise ValidationError(f"{field} holds {len(data)} values; at most {MAX_METRICS} are taken.")
    for key, reading in data.items():
        text(key, f"{field} name", most=64)
        number(reading, f"{field}.{key}", high=1e18)
    return data


GPU_READINGS = {
    "utilization_gpu_percent": 100.0,
    "utilization_memory_percent": 100.0,
    "fan_percent": 100.0,
    "power_w": MAX_WATTS,
    "sm_clock_mhz": MAX_MHZ,
    "memory_clock_mhz": MAX_MHZ,
    "memory_used_bytes": MAX_GPU_BYTES,
    "memory_total_bytes": MAX_GPU_BYTES,
    "energy_mj": BIG,
}


def gpu_samples(value: object) -> list[dict[str, Any]]:
    """`hostagent.probes.nvml.GpuSample.to_dict()` each: readings null or in range, a time in the window."""
    samples = seq(value, "gpu_samples", most=MAX_SAMPLES)
    for n, sample in enumerate(samples):
        where = f"gpu_samples[{n}]"
        sample = obj(sample, where, optional=False)
        number(sample.get("index"), f"{where}.index", high=MAX_GPU_INDEX, optional=False, whole=True)
        text(sample.get("uuid"), f"{where}.uuid", most=80)
        epoch(sample.get("timestamp"), f"{where}.timestamp")
        for key, high in GPU_READINGS.items():
            number(sample.get(key), f"{where}.{key}", high=high)
        number(sample.get("temperature_c"), f"{where}.temperature_c", low=-100, high=300)
        for m, proc in enumerate(seq(sample.get("processes"), f"{where}.processes", most=4096)):
            proc = obj(proc, f"{where}.processes[{m}]", optional=False)
            number(proc.get("pid"), f"{where}.processes[{m}].pid", high=2**31, whole=True)
            number(proc.get("used_memory_bytes"), f"{where}.processes[{m}].used_memory_bytes", high=MAX_GPU_BYTES)
    return samples


def engine_samples(value: object) -> list[dict[str, Any]]:
    """Engine metrics kept while the panel was away: `ts` (seconds) plus the metrics."""
    samples = seq(value, "engine_samples", most=MAX_SAMPLES)
    for n, sample in enumerate(samples):
        where = f"engine_samples[{n}]"
        sample = obj(sample, where, optional=False)
        epoch(sample.get("ts"), f"{where}.ts")
        engine_metrics({k: v for k, v in sample.items() if k != "ts"}, where)
    return samples


MAX_HOST_BYTES = 1 << 60  # RAM or swap of one host: an exbibyte
MAX_LOAD = 1e7  # a load average: runnable tasks, far beyond any real machine's
HOST_READINGS = {
    "cpu_percent": 100.0,
    "load_1": MAX_LOAD,
    "load_5": MAX_LOAD,
    "load_15": MAX_LOAD,
    "memory_total_bytes": MAX_HOST_BYTES,
    "memory_available_bytes": MAX_HOST_BYTES,
    "swap_total_bytes": MAX_HOST_BYTES,
    "swap_used_bytes": MAX_HOST_BYTES,
}


def host_samples(value: object) -> list[dict[str, Any]]:
    """`hostagent.probes.host_usage.HostUsage.to_dict()` each: readings null or in range, a time
    in the window."""
    samples = seq(value, "host_samples", most=MAX_SAMPLES)
    for n, sample in enumerate(samples):
        where = f"host_samples[{n}]"
        sample = obj(sample, where, optional=False)
        epoch(sample.get("timestamp"), f"{where}.timestamp")
        for key, high in HOST_READINGS.items():
            number(sample.get(key), f"{where}.{key}", high=high)
    return samples


MAX_ENGINES = 64  # engines one host runs at once (its own and the front door's)
MAX_OUTSIDE = 256  # processes the panel did not start, listed in one report (hostagent.held)
DEVICE = re.compile(r"(gpu\d{1,4}|ram)")


def memory(value: object) -> dict[str, Any] | None:
    """`hostagent.held.memory_report`: each engine's bytes per device by revision id, and the GPU
    memory held by processes the panel did not start; None when the report has none."""
    if value is None:
        return None
    data = obj(value, "memory", optional=False)
    epoch(data.get("ts"), "memory.ts")
    engines = []
    for n, engine in enumerate(seq(data.get("engines"), "memory.engines", most=MAX_ENGINES)):
        where = f"memory.engines[{n}]"
        engine = obj(engine, where, optional=False)
        revision_id = str(engine.get("revision_id"))
        if not revision_id.isdigit() or len(revision_id) > 18:
            raise ValidationError(f"{where}.revision_id must be a revision's id.")
        devices = obj(engine.get("devices"), f"{where}.devices", optional=False)
        if len(devices) > MAX_GPUS_PER_HOST + 1:
            raise ValidationError(f"{where}.devices names more devices than a host has.")
        for device, size in devices.items():
            if not DEVICE.fullmatch(device) or int(device[3:] or 0) > MAX_GPU_INDEX:
                raise ValidationError(f"{where}.devices: {_show(device)} is not gpuN or ram.")
            number(size, f"{where}.devices.{device}", high=MAX_HOST_BYTES, optional=False, whole=True)
        engines.append({"revision_id": revision_id, "devices": devices})
    outside = seq(data.get("outside"), "memory.outside", most=MAX_OUTSIDE)
    for n, row in enumerate(outside):
        where = f"memory.outside[{n}]"
        row = obj(row, where, optional=False)
        number(row.get("pid"), f"{where}.pid", high=2**31, optional=False, whole=True)
        text(row.get("name"), f"{where}.name", most=64, optional=False)
        number(row.get("gpu"), f"{where}.gpu", high=MAX_GPU_INDEX, optional=False, whole=True)
        number(row.get("bytes"), f"{where}.bytes", high=MAX_GPU_BYTES, optional=False, whole=True)
    return {"ts": data.get("ts"), "engines": engines, "outside": outside}


def telemetry(body: dict[str, Any]) -> Telemetry:
    """GPU samples, engine samples, the host's CPU and memory samples, and what each engine holds."""
    checked = {
        "gpu_samples": gpu_samples(body.get("gpu_samples")),
        "engine_samples": engine_samples(body.get("engine_samples")),
        "host_samples": host_samples(body.get("host_samples")),
        "memory": memory(body.get("memory")),
    }
    return typed(Telemetry, checked)


# --- events, engine log, operations -------------------------------------------------------------


def event(body: dict[str, Any]) -> WatchdogEvent:
    kind = body.get("kind")
    if kind not in WATCHDOG_EVENTS:
        raise ValidationError(f"kind must be one of {', '.join(WATCHDOG_EVENTS)}.")
    return typed(WatchdogEvent, {"kind": kind, "message": log_text(body.get("message"), "message", keep=MAX_TEXT)})


def host_event(body: dict[str, Any]) -> HostEventReport:
    """What the agent reports of itself (serving.host_events): its reason is report text, kept
    like a watchdog's message (NUL and lone surrogates replaced), never refused for them."""
    reason = log_text(body.get("reason"), "reason", keep=HOST_EVENT_REASON_CHARS)
    try:
        return HostEventReport.from_dict({"kind": body.get("kind"), "reason": reason})
    except WireError as exc:
        raise ValidationError(str(exc)) from None


def engine_log(body: dict[str, Any]) -> EngineLogChunk:
    """A run's identity with its start in the window, and its lines (bytes offset..end of the
    host's file); the positions and the lines' count and length are the service's
    (deployments.services.engine_logs), the body's size the endpoint's."""
    run = obj(body.get("run"), "run", optional=False)
    text(run.get("key"), "run.key", most=80, optional=False)
    text(run.get("engine"), "run.engine", most=40)
    text(run.get("revision_label"), "run.revision_label", most=200)
    revision_id = run.get("revision_id")  # one that names none of the host's revisions is left out
    if isinstance(revision_id, str):
        text(revision_id, "run.revision_id", most=40)
    elif revision_id is not None and (isinstance(revision_id, bool) or not isinstance(revision_id, int)):
        raise ValidationError("run.revision_id must be a revision's id.")
    iso_time(run.get("started_at"), "run.started_at")
    return typed(EngineLogChunk, {**body, "run": run})


def worker(value: object, default: str) -> str:
    return text(value, "worker", most=200) or default


def progress(body: dict[str, Any]) -> OperationProgress:
    """Stage, fraction done (0 to 1) and log text; a log longer than PROGRESS_LOG_CHARS keeps
    its tail, after a line that says how much was cut (the agent would only send it again)."""
    stage = text(body.get("stage"), "stage", most=MAX_TEXT, one_line=False)
    fraction = number(body.get("progress"), "progress", high=1)
    log = log_text(body.get("log"), "log", keep=PROGRESS_LOG_CHARS)
    fraction = float(fraction) if fraction is not None else None
    return typed(OperationProgress, {"stage": stage, "progress": fraction, "log": log or None})


def finish(body: dict[str, Any]) -> OperationEnd:
    """An operation's end: its state, a result of at most RESULT_BYTES, the error text (cut to
    its head by the service), a benchmark's figures and an install's record when there are."""
    state = body.get("state")
    if state not in FINISHING:
        raise ValidationError(f"state must be one of {', '.join(FINISHING)}.")
    result = json_value(obj(body.get("result"), "result"), "result", most_bytes=RESULT_BYTES)
    error = log_text(body.get("error"), "error", keep=MAX_ERROR - 100)  # the note fits in what is kept
    benchmark = None
    if body.get("benchmark") is not None:
        benchmark = json_value(obj(body["benchmark"], "benchmark"), "benchmark", most_bytes=BENCHMARK_BYTES)
        if "status" in benchmark and not text(benchmark["status"], "benchmark.status", most=20, optional=False):
            raise ValidationError("benchmark.status must not be empty.")
        number(benchmark.get("energy_j"), "benchmark.energy_j", high=1e15)
        for n, level in enumerate(seq(benchmark.get("levels"), "benchmark.levels", most=1000)):
            level = obj(level, f"benchmark.levels[{n}]", optional=False)
            for m, record in enumerate(seq(level.get("requests"), f"benchmark.levels[{n}].requests", most=10**6)):
                obj(record, f"benchmark.levels[{n}].requests[{m}]", optional=False)
    install = None
    if body.get("install") is not None:
        install = json_value(obj(body["install"], "install"), "install", most_bytes=MAX_STATE_BYTES)
        text(install.get("engine"), "install.engine", most=40)
        text(install.get("version"), "install.version", most=100)
    checked = {"state": state, "result": result, "error": error, "benchmark": benchmark, "install": install}
    return typed(OperationEnd, checked)


MAX_DOOR_MODELS = 256  # models one front door reports (its routing table's)
MAX_USAGE_ROWS = 10_000  # (day, key, model) rows: 31 days of many keys and models
# A usage row is one UTC day of one key on one model. A refused report books nothing, and the
# door sends its totals again in the next one, so these lie above any real day: 10^9 requests is
# 11,500 a second all day; 10^12 tokens is 11.6 million a second, beyond any one host (an H100
# embeds some 10^5 tokens a second). They refuse the absurd: 10^15 tokens, a count past a bigint.
MAX_USAGE_REQUESTS = 10**9
MAX_USAGE_TOKENS = 10**12


def _door_state_row(row: Any, at: str) -> dict[str, Any]:
    row = obj(row, at, optional=False)
    checked = {
        "name": text(row.get("name"), f"{at}.name", most=200, optional=False),
        "aliases": [text(a, f"{at}.aliases", most=63) for a in seq(row.get("aliases"), f"{at}.aliases", most=64)],
        "mode": text(row.get("mode"), f"{at}.mode", most=20),
        "phase": text(row.get("phase"), f"{at}.phase", most=20),
        "in_flight": number(row.get("in_flight"), f"{at}.in_flight", high=1_000_000, whole=True),
        "waiting": number(row.get("waiting"), f"{at}.waiting", high=1_000_000, whole=True),
        "idle_s": number(row.get("idle_s"), f"{at}.idle_s", high=1e9),
        "last_load_s": number(row.get("last_load_s"), f"{at}.last_load_s", high=1e6),
        "removed": bool(row.get("removed")),
    }
    for sizes in ("memory", "measured"):
        found = obj(row.get(sizes), f"{at}.{sizes}")
        if len(found) > MAX_GPUS_PER_HOST + 1:
            raise ValidationError(f"{at}.{sizes} names too many devices.")
        checked[sizes] = {
            text(device, f"{at}.{sizes}", most=16, optional=False): number(
                size, f"{at}.{sizes}.{device}", high=MAX_GPU_BYTES * 1024, whole=True
            )
            for device, size in found.items()
        }
    return checked


def _usage_row(row: Any, at: str) -> dict[str, Any]:
    """One (day, key, model) total, checked: a day in the window, counts in range."""
    row = obj(row, at, optional=False)
    raw_day = text(row.get("day"), f"{at}.day", most=10, optional=False) or ""
    try:
        day = date.fromisoformat(raw_day) if len(raw_day) == 10 else None
    except ValueError:
        day = None
    if day is None:
        raise ValidationError(f"{at}.day must be a date, YYYY-MM-DD.")
    low, high = _window()
    if not low.date() <= day <= high.date():
        raise ValidationError(f"{at}.day must lie between 2000 and a day from now, not {raw_day}.")
    counts = {
        c: number(row.get(c, 0), f"{at}.{c}", high=MAX_USAGE_TOKENS if c.endswith("tokens") else MAX_USAGE_REQUESTS,
                  optional=False, whole=True)
        for c in USAGE_COUNTS
    }  # fmt: skip
    if counts["errors"] > counts["requests"]:
        raise ValidationError(f"{at}.errors ({counts['errors']:,}) exceeds its requests ({counts['requests']:,}).")
    return {
        "day": day.isoformat(),  # one way of writing it: the report's rows are told apart by it
        "key": text(row.get("key"), f"{at}.key", most=63) or "",
        "model": text(row.get("model"), f"{at}.model", most=200, optional=False),
        **counts,
    }


def serving_report(body: dict[str, Any]) -> DoorReport:
    """A front door's report: {version, bind, state: [...], usage: [...]}, checked."""
    rows = seq(body.get("usage"), "usage", most=MAX_USAGE_ROWS)
    usage = [_usage_row(row, f"usage[{i}]") for i, row in enumerate(rows)]
    if len({(u["day"], u["key"], u["model"]) for u in usage}) != len(usage):
        raise ValidationError("usage lists one (day, key, model) twice.")
    checked = {
        "version": text(body.get("version"), "version", most=64) or "",
        "bind": text(body.get("bind"), "bind", most=100) or "",
        "state": [
            _door_state_row(r, f"state[{i}]")
            for i, r in enumerate(seq(body.get("state"), "state", most=MAX_DOOR_MODELS))
        ],
        "usage": usage,
        "refused": _refused_table(body.get("refused")),
    }
    return typed(DoorReport, checked)


def _refused_table(value: object) -> dict[str, str] | None:
    """The panel's table the door refused: {version, reason}, or null (it serves the panel's)."""
    if value is None:
        return None
    refused = obj(value, "refused", optional=False)
    return {
        "version": text(refused.get("version"), "refused.version", most=64) or "",
        "reason": text(refused.get("reason"), "refused.reason", most=500, optional=False) or "",
    }

"""The agent's loops beside its Celery worker: heartbeat (engine state and metrics, and the
outbox sent again once the panel is back), telemetry (CPU, memory and GPUs), the engine's log
as it grows, and the engine watchdog."""

from __future__ import annotations

import contextlib
import logging
import math
import queue
import threading
from typing import Any

import httpx
from django.conf import settings

from hostagent.held import host_memory_report
from hostagent.probes.host_usage import HostUsageSampler
from hostagent.probes.nvml import nvml_session, read_samples
from hostagent.runtime.local_http import engine_get
from hostagent.runtime.readiness import api_key_from_spec, auth_headers
from hostagent.runtime.watchdog import Watchdog
from hostagent.runtime.watchdog import WatchdogEvent as RuntimeWatchdogEvent
from serving.agent_reports import Heartbeat, Telemetry, WatchdogEvent
from serving.engines.base import LaunchSpec
from serving.engines.registry import get_adapter
from serving.wire import WireError

from .context import AgentContext
from .enginelog import EngineLogShipper
from .launch import launch_spec
from .local import EngineState, engine_state
from .panel import CredentialRefused, PanelAway, PanelError

log = logging.getLogger("controlpanel.agent")
# Readings measured and not yet handed to the port (the outbox takes them when the panel is away):
# at most this many, a day at the default interval.
TELEMETRY_WAITING = 10_000


def engine_metrics(ctx: AgentContext, state: EngineState) -> dict[str, float | None]:
    """The engine's own metrics in the common shape, when it runs and exposes them."""
    if not state.get("running") or not state.get("revision_id"):
        return {}

    try:
        launch = ctx.launch_of(str(state["revision_id"]))
        if launch is None:
            return {}
        spec = launch_spec(launch)
    except Exception:  # noqa: BLE001 - metrics are a nicety; the heartbeat goes on without them
        return {}
    if not spec.metrics_url:
        return {}
    # The engine's key: llama-server's --api-key guards its /metrics (answers 401 without it).
    key = api_key_from_spec(spec)
    try:
        text = engine_get(spec.metrics_url, timeout=3.0, headers=auth_headers(key)).text
    except httpx.HTTPError:
        return {}
    try:
        metrics = get_adapter(spec.engine).parse_metrics(text)
    except ValueError:  # not metrics yet (llama-server answers 503 JSON while it loads)
        return {}
    # An engine's NaN (a ratio of nothing yet) is no reading: the panel refuses NaN in a report.
    return {k: _finite(v) for k, v in metrics.__dict__.items() if k != "raw"}


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def heartbeat_loop(ctx: AgentContext, stop: threading.Event) -> None:
    while True:
        try:
            state = engine_state(ctx.supervisor)
            builds = ctx.pip_cache.builds()
            cached = {"llama.cpp": builds} if builds is not None else None
            beat = Heartbeat(engine_state=state, engine_metrics=engine_metrics(ctx, state), cached_builds=cached)
            ctx.panel.heartbeat(beat)
            ctx.panel.flush()
        except CredentialRefused as exc:
            log.error("heartbeat refused: %s", exc)
        except (PanelAway, PanelError) as exc:
            log.warning("heartbeat not delivered: %s", exc)
        except Exception:  # noqa: BLE001 - a heartbeat must survive anything
            log.exception("heartbeat failed")
        if stop.wait(settings.AGENT_HEARTBEAT_S):
            return


def telemetry_loop(ctx: AgentContext, stop: threading.Event, *, gpus: bool = True) -> None:
    """Every TELEMETRY_INTERVAL_S: the host's CPU and memory (CPU busy over the interval),
    where NVML answers each GPU's sample, and the memory each engine holds, in one report."""
    usage = HostUsageSampler()
    measured: queue.Queue[Telemetry] = queue.Queue(maxsize=TELEMETRY_WAITING)
    sender = threading.Thread(target=_telemetry_sender, args=(ctx, measured, stop), daemon=True, name="telemetry-send")
    sender.start()
    with contextlib.ExitStack() as stack:
        lib = _gpu_session(stack) if gpus else None
        while not stop.wait(settings.TELEMETRY_INTERVAL_S):
            try:
                host = usage.sample()
                samples = read_samples(lib) if lib is not None else None
                gpu_samples = tuple(s.to_dict() for s in samples or ())
                # What each engine the panel started holds (per GPU, or resident on a CPU host), and
                # what processes it did not start hold on the GPUs: hostagent.held.
                memory = host_memory_report(ctx.supervisor, samples)
                if host is not None or gpu_samples or memory.engines:
                    host_samples = (host.to_dict(),) if host is not None else ()
                    measured.put_nowait(Telemetry(gpu_samples=gpu_samples, host_samples=host_samples, memory=memory))
            except queue.Full:
                log.error("telemetry: %d readings wait to be sent; this one is dropped", TELEMETRY_WAITING)
            except Exception:  # noqa: BLE001 - a probe's fault is logged; the loop goes on
                log.exception("telemetry failed")
    sender.join(timeout=5)


def _telemetry_sender(ctx: AgentContext, measured: queue.Queue[Telemetry], stop: threading.Event) -> None:
    """Send what the loop measured, apart from the measuring: a panel that takes its time to
    answer (a stopped web server: up to the port's timeout) delays the report, never the next
    reading. Readings that piled up meanwhile go in one report (with the newest memory report);
    the port keeps it in the outbox when the panel is away."""
    while not (stop.is_set() and measured.empty()):
        try:
            report = measured.get(timeout=0.5)
        except queue.Empty:
            continue
        with contextlib.suppress(queue.Empty):
            while True:
                more = measured.get_nowait()
                report = Telemetry(
                    gpu_samples=(*report.gpu_samples, *more.gpu_samples),
                    host_samples=(*report.host_samples, *more.host_samples),
                    memory=more.memory,
                )
        try:
            ctx.panel.telemetry(report)
        except Exception:  # noqa: BLE001 - kept in the outbox when the panel is away; anything else is logged
            log.exception("telemetry not sent")


def _gpu_session(stack: contextlib.ExitStack) -> Any:
    """NVML, open until the loop ends; None (CPU and memory go on alone) when it does not open."""
    try:
        return stack.enter_context(nvml_session())
    except Exception:  # noqa: BLE001 - a driver fault stops GPU samples, not the host's own
        log.exception("GPU telemetry off: NVML did not open")
        return None


def engine_log_loop(ctx: AgentContext, stop: threading.Event) -> None:
    shipper = EngineLogShipper(ctx.supervisor, ctx.panel)
    while not stop.wait(settings.AGENT_ENGINE_LOG_S):
        try:
            shipper.tick()
        except Exception:  # noqa: BLE001 - the log is a view; the loop survives anything
            log.exception("engine log not sent")


def agent_watchdog(ctx: AgentContext) -> Watchdog:
    """The engine watchdog as the agent runs it (start_watchdog starts it): it restarts a revision
    with that revision's launch, remembered or asked of the panel, and tells the panel what it did."""

    def spec_provider(revision_id: str | None) -> LaunchSpec | None:
        # The revision the watchdog names: after a failed restart the engine record is gone, and
        # only the watchdog's retry still knows which revision to start again.
        if not revision_id:
            return None
        try:
            launch = ctx.launch_of(revision_id)
        except WireError as exc:  # the panel's launch breaks the protocol: nothing to restart with
            log.error("watchdog on %s: the launch of revision id %s cannot be read: %s", ctx.host, revision_id, exc)
            return None
        return launch_spec(launch) if launch is not None else None

    def on_event(event: RuntimeWatchdogEvent) -> None:
        if event.kind in ("restarted", "restart_failed", "gave_up"):
            log.warning("watchdog on %s: %s", ctx.host, event.message)
            ctx.panel.event(WatchdogEvent(kind=event.kind, message=event.message[:300]))

    return Watchdog(
        ctx.supervisor,
        spec_provider,
        interval=settings.WATCHDOG_INTERVAL_S,
        timeout=settings.WATCHDOG_TIMEOUT_S,
        failure_threshold=settings.WATCHDOG_FAILURES,
        max_restarts=settings.WATCHDOG_MAX_RESTARTS,
        window=settings.WATCHDOG_WINDOW_S,
        on_event=on_event,
    )


def start_watchdog(ctx: AgentContext) -> Watchdog:
    dog = agent_watchdog(ctx)
    dog.start()
    return dog


def start_loops(
    ctx: AgentContext, *, telemetry: bool, gpus: bool = True
) -> tuple[threading.Event, list[threading.Thread]]:
    stop = threading.Event()
    threads = [
        threading.Thread(target=heartbeat_loop, args=(ctx, stop), daemon=True, name="heartbeat"),
        threading.Thread(target=engine_log_loop, args=(ctx, stop), daemon=True, name="engine-log"),
    ]
    if telemetry:
        threads.append(
            threading.Thread(
                target=telemetry_loop, args=(ctx, stop), kwargs={"gpus": gpus}, daemon=True, name="telemetry"
            )
        )
    for thread in threads:
        thread.start()
    return stop, threads

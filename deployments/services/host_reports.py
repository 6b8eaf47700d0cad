"""What a host's agent reports, taken in by the panel: registration, reconciliation, the end
of an operation with its results, watchdog events, engine samples.

Called by the agent API (deployments.agent_api) for the host whose credential made the
request; every function here takes that host and touches only its rows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from deployments.choices import ACTIVE_STATES, OperationKind, OperationState
from deployments.models import BenchmarkRun, DeploymentRevision, Operation, active_revision_id_of, active_revision_of
from deployments.runtime_bridge import runs_on_this_machine
from hardware.models import EngineSample, Host, HostEvent
from hardware.services import (
    ENGINE_SAMPLE_FIELDS,
    host_address_follow_lan,
    host_event_record,
    host_heartbeat,
    host_probe_record,
)
from notifications.events import host_event, watchdog_event
from notifications.services import notify
from serving.agent_reports import InstallRecord, Registered, Restore

from .benchmarks import benchmark_run_record, benchmark_run_start
from .host_models import host_model_forget, host_model_record
from .installs import install_record
from .operations import operation_begin, operation_finish, operations_mark_lost
from .revisions import revision_mark_active
from .serving import serving_restore

if TYPE_CHECKING:
    from serving.host_events import HostEventReport

WATCHDOG_EVENTS = ("restarted", "restart_failed", "gave_up")
# What became of an operation's work when its host's agent restarted in the middle of it.
LOST_IN_A_RESTART = {
    OperationKind.INSTALL: "The host's agent restarted in the middle of this install: the agent stopped the "
    "build it left running and nothing was recorded as installed. Install again (what pip downloaded is cached).",
    OperationKind.DOWNLOAD: "The host's agent restarted in the middle of this download: the parts fetched so far "
    "are kept, and downloading the same files again resumes where this one stopped.",
}
MAX_SAMPLES = 10_000  # per report; a buffered backlog comes in several


def _install_took(op: Operation) -> dict[str, int]:
    """{"install_seconds": n}: how long the install ran on the host (from its start to this report)."""
    if op.started_at is None:
        return {}
    return {"install_seconds": max(0, int((timezone.now() - op.started_at).total_seconds()))}


def host_register(*, host: Host, facts: dict[str, Any], inventory: dict[str, Any], engine_state: Any) -> Registered:
    """An agent (re)starting: its probe is recorded, operations its previous run left running
    end `lost` (which frees the host lock), the host points at the revision that serves, and
    when nothing serves, the active revision is started again (deployments.services.serving)."""
    host = host_probe_record(name=host.name, facts=facts, inventory=inventory)
    if runs_on_this_machine(host):  # the panel's own machine: its address follows CONTROLPANEL_LAN_ADDRESS
        host = host_address_follow_lan(host)
    lost = operations_mark_lost(
        host=host,
        worker_gone=True,
        reason="the host's worker stopped in the middle of this operation (it restarted since)",
        by_kind=LOST_IN_A_RESTART,
    )
    host_reconcile(host=host, engine_state=engine_state)
    restore = serving_restore(host=host, engine_state=engine_state)  # its engine did not survive the restart
    return Registered(
        host=host.name,
        queue=host.queue,
        gpus=host.gpus.count(),
        mismatches=tuple(host.probe_mismatches),
        lost=tuple(str(op.pk) for op in lost),
        restore=_restore_answer(restore),
        # The installs an order's HostBrief carries: the agent starts engines before any order comes.
        engine_installs=host.engine_installs if isinstance(host.engine_installs, dict) else {},
    )


def _restore_answer(restore: Operation | None) -> Restore | None:
    """The start the panel queued (its operation, the revision's number and id: the agent's door
    holds requests for that revision until the start ends), or None."""
    if restore is None:
        return None
    return Restore(operation=str(restore.pk), revision=restore.params["revision"], revision_id=str(restore.revision_id))


def host_reconcile(*, host: Host, engine_state: Any) -> None:
    """Record what the host really runs; point the host at the revision that serves, when it
    is one of the host's own and healthy."""
    state = engine_state if isinstance(engine_state, dict) else {}
    host_heartbeat(host=host, engine_state=state)
    _point_at_serving(host, state)


def host_alive(
    *,
    host: Host,
    engine_state: dict[str, Any],
    engine_metrics: dict[str, Any] | None,
    cached_builds: dict[str, Any] | None = None,
) -> None:
    """A heartbeat: the agent is alive, and what its engine serves is what the host serves once
    nothing is under way there. A switch lost to an agent's restart may have left the engine it
    started running, still loading when the agent registered again: the first heartbeat after
    it turned healthy points the host at it (bench/chaos.py found the pointer left behind)."""
    host_heartbeat(host=host, engine_state=engine_state, engine_metrics=engine_metrics, cached_builds=cached_builds)
    if not Operation.objects.filter(host=host, state__in=ACTIVE_STATES).exists():
        _point_at_serving(host, engine_state)


def _point_at_serving(host: Host, state: dict[str, Any]) -> None:
    rev_id = str(state.get("revision_id") or "")
    if (
        state.get("running")
        and state.get("healthy")
        and rev_id.isdigit()
        and str(active_revision_id_of(host)) != rev_id
    ):
        revision = DeploymentRevision.objects.filter(pk=int(rev_id), host=host).first()
        if revision is not None:
            revision_mark_active(revision=revision, actor=None, reason="reconciled from the host")


def operation_host_begin(*, host: Host, op_id: Any, worker: str) -> Operation | None:
    """The host's agent starts its queued operation; None when it is not queued any more
    (a redelivered message must not act twice). A benchmark gets its run row now."""
    op = operation_begin(op_id=op_id, worker=worker[:200])
    if op is not None and op.kind == OperationKind.BENCHMARK and op.revision is not None:
        benchmark_run_start(op=op, gpus=[{"index": g.index, "name": g.name} for g in host.gpus.order_by("index")])
    return op


@transaction.atomic
def operation_host_finish(
    *,
    op: Operation,
    state: str,
    result: dict[str, Any],
    error: str,
    benchmark: dict[str, Any] | None = None,
    install: InstallRecord | None = None,
) -> bool:
    """The host's agent ends its operation, with what it measured or installed, in one
    transaction. A switch (or a rollback) that succeeded points the host at its revision.

    A report that arrives after the panel marked the operation `lost` (the panel was away and
    the agent kept the report until it came back) still ends it with the host's word; then a
    successful switch does not move the host's pointer (a later switch may have). Returns
    False when the operation had already ended otherwise (a report sent twice)."""
    # The operation's row only: an install or a switch locks its host's row where it writes it
    # (install_record, revision_mark_active); a benchmark's or a download's end leaves it alone.
    locked = Operation.objects.select_for_update(of=("self",)).select_related("host").get(pk=op.pk)
    late = locked.state == OperationState.LOST
    if locked.state not in ACTIVE_STATES and not late:
        return False
    result = dict(result)
    if benchmark is not None and locked.kind == OperationKind.BENCHMARK:
        run = BenchmarkRun.objects.filter(operation=locked).first()
        if run is None and locked.revision is not None:
            run = benchmark_run_start(op=locked, gpus=[])
        if run is not None:
            benchmark_run_record(run=run, result=benchmark)
            result["benchmark_run"] = run.pk
    if install is not None and locked.kind == OperationKind.INSTALL and state == OperationState.SUCCEEDED:
        engine = locked.params.get("engine")
        if install.engine != engine:
            raise ValidationError(f"This operation installs {engine}, not {install.engine!r}.")
        install_record(
            host=locked.host,
            engine=engine,
            version=install.version,
            path=_host_path(install.path, "path"),
            binary=_host_path(install.binary, "binary") if install.binary else "",
            # with the host's own figure for the next install's estimate
            details={**install.details.to_dict(), **_install_took(locked)},
            actor=locked.requested_by,
            read_again=bool(locked.params.get("read_again")),
        )
    if locked.kind == OperationKind.DOWNLOAD and state == OperationState.SUCCEEDED:
        report = result.get("download")
        if not isinstance(report, dict):
            raise ValidationError("A finished download reports what it put on the disk.")
        result["host_model"] = host_model_record(op=locked, report=report).pk
    if locked.kind == OperationKind.MODEL_DELETE and state == OperationState.SUCCEEDED:
        host_model_forget(op=locked)
    if (
        locked.kind in (OperationKind.SWITCH, OperationKind.ROLLBACK)
        and state == OperationState.SUCCEEDED
        and locked.revision is not None
        and not late
    ):
        revision_mark_active(revision=locked.revision, actor=locked.requested_by, reason=f"switch {locked.pk}")
    if late:
        result["reported_after_lost"] = True
    operation_finish(op_id=locked.pk, state=state, result=result, error=error, accept_lost=late)
    return True


def _host_path(value: object, field: str) -> str:
    """A path the host reports (pages, scripts and units show and run it): absolute, one line."""
    text = value if isinstance(value, str) else ""
    if not text.startswith("/") or len(text) > 1000 or any(c in text for c in "\x00\n\r"):
        raise ValidationError({field: f"The host reported an install {field} that is not an absolute path."})
    return text


def watchdog_event_record(*, host: Host, kind: str, message: str) -> None:
    """The watchdog's report: a host event (its page) and a notification."""
    if kind not in WATCHDOG_EVENTS:
        raise ValidationError(f"Unknown watchdog event {kind!r}.")
    serving = active_revision_of(host)
    event = watchdog_event(host, kind, str(message), serving=serving.number if serving else None)
    host_event_record(
        host=host,
        kind=f"watchdog.{kind}",
        summary=event.summary if event else f"Watchdog: {kind}",
        reason=str(message),
        revision=f"r{serving.number}" if serving else "",
    )
    notify(event)


# What the panel says of each kind an agent reports itself (serving.host_events.HOST_REPORTED).
HOST_REPORTED_SUMMARY = {
    HostEvent.Kind.AGENT_RESTARTED: "{host}'s agent started again after its previous run was killed or crashed.",
    HostEvent.Kind.DOOR_DOWN: "{host}'s front door is down: clients of its endpoint get no answer.",
    HostEvent.Kind.DOOR_UP: "{host}'s front door answers again.",
}


def host_event_report(*, host: Host, report: HostEventReport) -> HostEvent:
    """What the agent reports happened to it: a host event, then its notification."""
    serving = active_revision_of(host)
    row = host_event_record(
        host=host,
        kind=report.kind,
        summary=HOST_REPORTED_SUMMARY[HostEvent.Kind(report.kind)].format(host=host.name),
        reason=report.reason,
        revision=f"r{serving.number}" if serving else "",
    )
    notify(host_event(row))
    return row


def engine_samples_record(*, host: Host, samples: list[dict[str, Any]]) -> int:
    """Engine metrics the agent kept while the panel was away, each at the time it was read."""
    rows = []
    for sample in samples[:MAX_SAMPLES]:
        if not isinstance(sample, dict):
            continue
        ts = sample.get("ts")
        when = datetime.fromtimestamp(float(ts), tz=UTC) if isinstance(ts, int | float) else timezone.now()
        values = {k: _number(sample.get(k)) for k in ENGINE_SAMPLE_FIELDS}
        rows.append(EngineSample(host_id=host.pk, ts=when, **values))
    EngineSample.objects.bulk_create(rows)
    return len(rows)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

"""What happened, as a notification event: built where the panel records it (an operation's
end, a watchdog report, a host's presence changing, a benchmark recorded), handed to
`notifications.services.notify`. Reads the rows it is given; writes nothing."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec

from django.urls import NoReverseMatch, reverse

from core.secrets_mask import mask_text
from hardware.models import Host, HostEvent

from .choices import EventKind
from .regression import Comparison, compare

ERROR_LINE = 500  # characters of an error kept in a message
log = logging.getLogger(__name__)
P = ParamSpec("P")


def never_raises(build: Callable[P, Event | None]) -> Callable[P, Event | None]:
    """An event builder runs inside the operation that raised it: whatever goes wrong in it
    (a row in a shape nobody expected) is logged and costs the notification, never the operation."""

    @functools.wraps(build)
    def safe(*args: P.args, **kwargs: P.kwargs) -> Event | None:
        try:
            return build(*args, **kwargs)
        except Exception:
            log.exception("the %s notification event could not be built", build.__name__)
            return None

    return safe


@dataclass(frozen=True)
class Event:
    kind: str  # EventKind
    summary: str  # what happened, one sentence
    host_id: int | None = None
    host_name: str = ""
    revision: str = ""  # "r5"
    error: str = ""  # the error line
    link_path: str = ""  # the panel page to look at, made absolute with CONTROLPANEL_URL
    details: tuple[str, ...] = ()
    comparisons: tuple[Comparison, ...] = field(default=())  # benchmark figures, for the rules' thresholds


def _path(view: str, **kwargs: Any) -> str:
    try:
        return reverse(view, kwargs=kwargs)
    except NoReverseMatch:  # a page that moved: the message still says what happened
        return ""


def error_line(text: str) -> str:
    """The first non-empty line of an error, shortened."""
    line = next((part.strip() for part in mask_text(text or "").splitlines() if part.strip()), "")
    return line if len(line) <= ERROR_LINE else line[: ERROR_LINE - 1] + "…"


def _rev(number: Any) -> str:
    return f"r{number}" if isinstance(number, int) and not isinstance(number, bool) else ""


@never_raises
def operation_event(op: Any) -> Event | None:
    """A switch or a start that failed (a switch rolled back, or its rollback failed too), a
    switch the host refused before it stopped anything, an install or a download that failed;
    None for every other end of an operation."""
    if op.state not in ("failed", "lost"):
        return None
    lost = " (lost: the host's worker stopped in the middle of it)" if op.state == "lost" else ""
    result = op.result if isinstance(op.result, dict) else {}
    params = op.params if isinstance(op.params, dict) else {}
    host = op.host
    revision = _rev(params.get("revision")) or _rev(result.get("revision"))
    previous = _rev(result.get("previous")) or _rev(params.get("previous"))
    common: dict[str, Any] = {
        "host_id": host.pk,
        "host_name": host.name,
        "revision": revision,
        "error": error_line(op.error),
        "link_path": _path("deployments:operation_detail", pk=op.pk),
    }
    target = f" to {revision}" if revision else ""
    if op.kind == "switch":
        if result.get("rollback_failed"):
            return Event(
                kind=EventKind.ROLLBACK_FAILED,
                summary=f"Switch of {host.name}{target} failed and the rollback to "
                f"{previous or 'the previous revision'} failed too: the host serves nothing.",
                **common,
            )
        if result.get("rolled_back"):
            return Event(
                kind=EventKind.SWITCH_ROLLED_BACK,
                summary=f"Switch of {host.name}{target} failed; rolled back to {previous or 'the previous revision'}.",
                **common,
            )
        if result.get("refused") and op.state == "failed":
            # The host's preflight said no before it stopped anything: what served before serves on.
            serving = f"{previous} still serving" if previous else "nothing was serving, nothing changed"
            return Event(
                kind=EventKind.SWITCH_REFUSED,
                summary=f"Switch refused: {serving} ({host.name} refused {revision or 'the revision'} "
                "before anything was stopped).",
                **common,
            )
        return Event(kind=EventKind.SWITCH_FAILED, summary=f"Switch of {host.name}{target} failed{lost}.", **common)
    if op.kind == "launch":  # a start of the active revision (Start, or restored after a restart)
        why = " after the host restarted" if params.get("reason") == "restore" else ""
        refused = " (refused on the host)" if result.get("refused") else lost
        summary = (
            f"Start of {revision or 'the active revision'} on {host.name}{why} failed{refused}: it serves nothing."
        )
        return Event(kind=EventKind.SWITCH_FAILED, summary=summary, **common)
    if op.kind == "rollback":
        return Event(kind=EventKind.ROLLBACK_FAILED, summary=f"Rollback of {host.name}{target} failed{lost}.", **common)
    if op.kind == "install":
        what = " ".join(str(p) for p in (params.get("engine"), params.get("version")) if p)
        summary = f"Install of {what or 'an engine'} on {host.name} failed{lost}."
        return Event(kind=EventKind.INSTALL_FAILED, summary=summary, **common)
    if op.kind == "download":
        tag = f"ollama {params['tag']}" if params.get("tag") else ""
        what = str(params.get("repo_id") or tag or "a model")
        summary = f"Download of {what} to {host.name} failed{lost}."
        return Event(kind=EventKind.DOWNLOAD_FAILED, summary=summary, **common)
    return None


@never_raises
def gate_event(gate: Any) -> Event | None:
    """A switch's benchmark gate that rolled the host back (its rollback operation's page shows the
    comparison); None for a gate that passed or stopped otherwise (a failed switch says so itself)."""
    if gate.state != "rolled_back":
        return None
    host = gate.host
    return Event(
        kind=EventKind.SWITCH_ROLLED_BACK,
        summary=f"Switch of {host.name} to r{gate.revision.number} failed its benchmark gate; "
        f"rolled back to r{gate.previous.number}.",
        host_id=host.pk,
        host_name=host.name,
        revision=f"r{gate.revision.number}",
        error=error_line(gate.reason),
        link_path=_path("deployments:operation_detail", pk=gate.switch_op_id) if gate.switch_op_id else "",
    )


WATCHDOG = {
    "restarted": (EventKind.WATCHDOG_RESTARTED, "The watchdog restarted the engine on {host}."),
    "restart_failed": (EventKind.WATCHDOG_RESTART_FAILED, "The watchdog could not restart the engine on {host}."),
    "gave_up": (EventKind.WATCHDOG_GAVE_UP, "The watchdog on {host} gave up restarting the engine."),
}


@never_raises
def watchdog_event(host: Host, kind: str, message: str, *, serving: int | None) -> Event | None:
    """The watchdog's report on `host`, which serves revision number `serving` (None: none)."""
    if kind not in WATCHDOG:
        return None
    event_kind, summary = WATCHDOG[kind]
    return Event(
        kind=event_kind,
        summary=summary.format(host=host.name),
        host_id=host.pk,
        host_name=host.name,
        revision=_rev(serving),
        error=error_line(message),
        link_path=_path("hardware:host_detail", name=host.name),
    )


def presence_event(host: Host, *, online: bool, reason: str = "") -> Event:
    return Event(
        kind=EventKind.HOST_ONLINE if online else EventKind.HOST_OFFLINE,
        summary=f"{host.name} is back: its agent reports again." if online else f"{host.name} went offline.",
        host_id=host.pk,
        host_name=host.name,
        error="" if online else error_line(reason),
        link_path=_path("hardware:host_detail", name=host.name),
    )


@never_raises
def host_event(row: HostEvent) -> Event | None:
    """A host event as recorded (hardware.services.host_event_record): the agent restarted after
    it was killed or crashed, the front door refused its table or went down or came back. Links
    to the host's events page; the reason is the error line."""
    host = row.host
    return Event(
        kind=row.kind,
        summary=row.summary,
        host_id=host.pk,
        host_name=host.name,
        revision=row.revision,
        error=error_line(row.reason),
        link_path=_path("hardware:host_events", name=host.name),
    )


@never_raises
def benchmark_event(run: Any, previous: Any) -> Event | None:
    """A completed run beside `previous`, the previous revision's run on the same profile
    (deployments.selectors.benchmarks.previous_benchmark_run); the rules decide, each with its
    own thresholds, whether that is a regression."""
    if run.status != "completed" or previous is None:
        return None
    comparisons = tuple(compare(previous.results or {}, run.results or {}))
    if not comparisons:
        return None
    revision, before = run.revision, previous.revision
    host = revision.host
    return Event(
        kind=EventKind.BENCHMARK_REGRESSED,
        summary=f"Benchmark '{run.profile_label}' of {host.name} r{revision.number} is slower than r{before.number}'s.",
        host_id=host.pk,
        host_name=host.name,
        revision=f"r{revision.number}",
        link_path=_path("deployments:benchmark_compare", a=previous.pk, b=run.pk),
        details=(f"Compared with run #{previous.pk} of r{before.number} ({previous.created_at:%Y-%m-%d %H:%M} UTC).",),
        comparisons=comparisons,
    )


ROLLOUT_KINDS = {
    "started": EventKind.ROLLOUT_STARTED,
    "stopped": EventKind.ROLLOUT_STOPPED,
    "finished": EventKind.ROLLOUT_FINISHED,
}


@never_raises
def rollout_event(rollout: Any, what: str) -> Event | None:
    """A rollout across hosts started, stopped (a failed wave, or cancelled) or finished: one
    event for the whole group (no host of its own), linking to the rollout's page."""
    kind = ROLLOUT_KINDS.get(what)
    if kind is None:
        return None
    parts = list(rollout.hosts.select_related("host").order_by("wave", "host__name"))
    by_state: dict[str, list[str]] = {}
    for part in parts:
        by_state.setdefault(part.get_state_display().lower(), []).append(part.host.name)
    said = {
        "started": f"started on {len(parts)} host(s) of {rollout.group}",
        "stopped": f"stopped ({rollout.get_state_display().lower()})",
        "finished": f"finished on all {len(parts)} host(s) of {rollout.group}",
    }[what]
    return Event(
        kind=kind,
        summary=f"Rollout #{rollout.pk} ({rollout.describe_change()}) {said}.",
        error=error_line(rollout.error),
        link_path=_path("rollouts:detail", pk=rollout.pk),
        details=tuple(f"{state}: {', '.join(names)}" for state, names in by_state.items()),
    )

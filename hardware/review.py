"""The review gate of a protected host: where a switch, an alias move or a serving-set change
becomes a change request instead of running (docs/change-requests.md).

The gated services (`switch_request`, `alias_set`, `serving_mode_set`) check everything they
check today, then call `review_check` just before they write. On a host that requires review it
raises `ReviewRequired`: the service's transaction rolls back (nothing changed), and `reviewed`,
the decorator around the service, hands the proposal to the change requests' app (`changes`),
which opens a request in its own transaction and answers with it: the caller gets
`ChangeRequested` (a ValidationError, so a caller that knows nothing of reviews still refuses
with a sentence and runs nothing).

It reads only the host and who acts, so it sits with the hosts, under every app that passes a
change through it: deployments' gated services, rollouts, and schedules (a scheduled change is
reviewed when it is scheduled). The policy (which hosts require review) and the opening of a
request live in `changes`, above them all: it installs them here when the app is ready
(`review_install`), so nothing here imports it. An approved request runs through the same
service with an `Approval`, which passes the gate and is recorded (`approval_stamp`) beside the
author, who stays the actor.

An approval binds the hosts its request was shown (`Approval.hosts`): the gate passes it only on
those hosts, and a rollout starts under it only over exactly those (`approval_covers`). A change
that runs later (a scheduled one) asks `approval_recheck` first: the request's bound set resolved
again, and `ApprovalStale` (the request marked stale) when anything differs.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

from django.core.exceptions import ValidationError

from core.audit import person_of
from hardware.models import Host

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Approval:
    """A reviewed change running: the request's id, the person who approved it and the hosts the
    approval covers (their ids; None: not bound, a rollout's trial or a rollout's later waves)."""

    change_id: int
    approver: Any
    hosts: frozenset[int] | None = None

    def stamp(self) -> dict[str, Any]:
        return {"change_request": self.change_id, "approved_by": getattr(self.approver, "username", "")}


def approval_stamp(approval: Approval | None) -> dict[str, Any]:
    """What an operation's params and an audit event's data add for an approved change ({} else)."""
    return approval.stamp() if approval is not None else {}


class ReviewRequired(Exception):  # noqa: N818 - a signal to `reviewed`, never seen outside it
    """Raised inside a gated service's transaction: the change is valid, and needs a review."""

    def __init__(
        self, *, host: Host, kind: str, params: dict[str, Any], summary: str, actor: AbstractUser | None
    ) -> None:
        super().__init__(summary)
        self.host, self.kind, self.params, self.summary, self.actor = host, kind, params, summary, actor


class OpenedRequest(Protocol):
    pk: Any

    def get_absolute_url(self) -> str: ...


class ChangeRequested(ValidationError):
    """The change did not run: a change request was opened for it (`change`)."""

    def __init__(self, change: OpenedRequest, host: Host) -> None:
        super().__init__(
            f"{host.name} requires review: change request #{change.pk} is open, and runs when another "
            "operator or admin approves it."
        )
        self.change = change


class ApprovalStale(ValidationError):
    """What an approval covered differs now (a host joined or left the group, a revision moved):
    the change does not run under it; it needs a fresh approval."""


@dataclass
class _Policy:
    required: Callable[[Host], bool] | None = None
    open: Callable[[ReviewRequired], OpenedRequest] | None = None
    recheck: Callable[[Approval], Approval] | None = None
    targets: Callable[[int], dict[int, dict[str, Any]] | None] | None = None


_policy = _Policy()
_asked: ContextVar[bool] = ContextVar("review_asked", default=False)


def review_install(
    *,
    required: Callable[[Host], bool],
    open: Callable[[ReviewRequired], OpenedRequest],
    recheck: Callable[[Approval], Approval] | None = None,
    targets: Callable[[int], dict[int, dict[str, Any]] | None] | None = None,
) -> None:
    """Called once by the `changes` app when it is ready."""
    _policy.required, _policy.open, _policy.recheck, _policy.targets = required, open, recheck, targets


def approval_targets(change_id: int) -> dict[int, dict[str, Any]] | None:
    """What an approved request covers, by host id: each host's entry (changes.binding: its
    "revision" or the "from" a rollout's new revision derives from); None when it bound nothing."""
    return _policy.targets(change_id) if _policy.targets is not None else None


def approval_recheck(approval: Approval) -> Approval:
    """Before an approved change runs later than its approval (a scheduled change when due): the
    approval with the hosts it binds, or ApprovalStale when its request's hosts, their protection
    or their revisions differ now (the request is marked stale and needs a fresh approval)."""
    return _policy.recheck(approval) if _policy.recheck is not None else approval


def approval_covers(approval: Approval | None, hosts: list[Host]) -> None:
    """A change over `hosts` under `approval` (a rollout's group): ApprovalStale unless they are
    exactly the hosts it was approved for."""
    if approval is None or approval.hosts is None:
        return
    now = {h.pk for h in hosts}
    added = sorted(h.name for h in hosts if h.pk not in approval.hosts)
    gone = sorted(Host.objects.filter(pk__in=approval.hosts - now).values_list("name", flat=True))
    reasons = [f"the group now holds host {name}, which this approval did not cover" for name in added]
    reasons += [f"the group no longer holds host {name}, which this approval covered" for name in gone]
    if reasons:
        raise ApprovalStale(
            f"Change request #{approval.change_id} is stale: {'; '.join(reasons)}. Nothing ran; it needs a fresh "
            "approval."
        )


def review_required(host: Host) -> bool:
    return _policy.required is not None and _policy.required(host)


@contextlib.contextmanager
def review_asked() -> Iterator[None]:
    """Open a request for the change even on a host that does not require review (the API's and
    the CLI's `open`)."""
    token = _asked.set(True)
    try:
        yield
    finally:
        _asked.reset(token)


def review_check(
    *,
    host: Host,
    kind: str,
    params: dict[str, Any],
    summary: str,
    actor: AbstractUser | None,
    approval: Approval | None,
) -> None:
    """In a gated service, after its own checks and before it writes. A person's change on a
    protected host (or one asked for review) raises ReviewRequired; an approved change on a host
    its approval covers, or the panel's own (no person: a task, the machine's administrator at its
    shell), passes; an approved change on any other host is refused (ApprovalStale)."""
    if approval is not None:
        if approval.hosts is not None and host.pk not in approval.hosts:
            raise ApprovalStale(
                f"{host.name} is not among the hosts change request #{approval.change_id} was approved for: "
                "nothing ran there; it needs a request and an approval of its own."
            )
        return
    if _policy.open is None:
        return
    if _asked.get() or (person_of(actor) is not None and review_required(host)):
        raise ReviewRequired(host=host, kind=kind, params=params, summary=summary, actor=actor)


def reviewed(service: Callable[P, R]) -> Callable[P, R]:
    """Around a gated service (outside its transaction): a ReviewRequired becomes an opened
    request and ChangeRequested."""

    @functools.wraps(service)
    def gated(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return service(*args, **kwargs)
        except ReviewRequired as exc:
            needed = exc
        if _policy.open is None:  # never: review_check raises only once it is installed
            raise needed
        raise ChangeRequested(_policy.open(needed), needed.host)

    return gated

"""The review gate of a protected host: where a switch, an alias move or a serving-set change
becomes a change request instead of running (docs/change-requests.md).

The gated services (`switch_request`, `alias_set`, `serving_mode_set`) check everything they
check today, then call `review_check` just before they write. On a host that requires review it
raises `ReviewRequired`: the service's transaction rolls back (nothing changed), and `reviewed`,
the decorator around the service, hands the proposal to the change requests' app (`changes`),
which opens a request in its own transaction and answers with it: the caller gets
`ChangeRequested` (a ValidationError, so a caller that knows nothing of reviews still refuses
with a sentence and runs nothing).

The policy (which hosts require review) and the opening of a request live in `changes`, above
this layer: it installs them here when the app is ready (`review_install`), so nothing here
imports it. An approved request runs through the same service with an `Approval`, which passes
the gate and is recorded (`approval_stamp`) beside the author, who stays the actor.
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
    """A reviewed change running: the request's id and the person who approved it."""

    change_id: int
    approver: Any

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


@dataclass
class _Policy:
    required: Callable[[Host], bool] | None = None
    open: Callable[[ReviewRequired], OpenedRequest] | None = None


_policy = _Policy()
_asked: ContextVar[bool] = ContextVar("review_asked", default=False)


def review_install(*, required: Callable[[Host], bool], open: Callable[[ReviewRequired], OpenedRequest]) -> None:
    """Called once by the `changes` app when it is ready."""
    _policy.required, _policy.open = required, open


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
    protected host (or one asked for review) raises ReviewRequired; an approved change, or the
    panel's own (no person: a task, the machine's administrator at its shell), passes."""
    if approval is not None or _policy.open is None:
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

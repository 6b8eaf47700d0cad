"""Change requests: open, review (approve, ask for changes, reject), re-confirm, withdraw; and
the admin's setting that a host requires review (docs/change-requests.md).

Who may: an operator or admin opens (through the gated services, hardware.review);
another operator or admin decides; nobody approves their own request, a viewer never decides.
An approved request runs at once through the same service, with its author as the actor and the
approver recorded beside; if that service refuses now (the host busy, the planner), the approval
is refused with its reason and the request stays open. A request that carries a time (its
params' `when`: a change scheduled on a protected host) is scheduled on approval instead, and
beat runs it then, approval and all (schedules.services.change_schedule). A request whose host changed since it was
proposed (`stale_reasons`) is not approved until its author re-confirms it.

An approval binds what the request showed (changes.binding): the exact hosts it reaches (a
rollout's group as it was when opened), their protection and the revision each gets. Resolved
again when it is approved, and when an approved change runs later (`approval_recheck`, a scheduled
one when due): any difference makes the request stale; it does not run, and it needs its author's
re-confirmation and a fresh approval. A host tagged into a rollout's group is never switched under
an approval that did not show it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.roles import ADMIN, OPERATOR, ensure_role
from core.audit import audit_record, audited_save, person_of
from deployments.models import ModelAlias, Operation, ServedRevision, active_revision_of
from hardware.models import Host
from hardware.review import Approval, ApprovalStale, ChangeRequested, ReviewRequired, review_asked
from notifications.services import notify
from rollouts.models import Rollout
from schedules.services import change_schedule, when_args

from .binding import bound_hosts, differences, resolve, seen_token
from .choices import ChangeKind, ChangeState, Verdict
from .events import change_event
from .kinds import kind_of
from .models import ChangeComment, ChangeRequest, HostReview

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

COMMENT_LIMIT = 5000


# --- the host's setting -----------------------------------------------------------------------


def host_requires_review(host: Host) -> bool:
    return HostReview.objects.filter(host_id=host.pk, required=True).exists()


@transaction.atomic
def host_review_set(*, host: Host, required: bool, actor: AbstractUser | None) -> HostReview:
    """Require review of changes to `host`, or stop requiring it (admins only, audited)."""
    ensure_role(actor, ADMIN)
    review, _ = HostReview.objects.select_for_update().get_or_create(host=host)
    if review.required == required:
        return review
    review.required, review.updated_by, review.updated_at = required, person_of(actor), timezone.now()
    audited_save(
        review,
        action="host.review",
        summary=f"{host.name}: changes {'need' if required else 'no longer need'} review",
        host=host,
        data={"required": required},
        actor=actor,
    )
    return review


# --- the host's state, and what changed since a request was proposed ---------------------------


def host_state(host: Host) -> dict[str, Any]:
    """What a request is proposed against: the active revision, the aliases and the serving set
    (revision numbers; a host's numbers never change)."""
    active = active_revision_of(Host.objects.select_related("deployment__active_revision").get(pk=host.pk))
    aliases = dict(ModelAlias.objects.filter(host=host).values_list("name", "revision__number"))
    served = ServedRevision.objects.filter(host=host).values_list("revision__number", "mode", "idle_ttl_s")
    return {
        "active": active.number if active else None,
        "aliases": {name: number for name, number in sorted(aliases.items())},
        "serving": {str(number): [mode, ttl] for number, mode, ttl in sorted(served)},
    }


def _rev(number: Any) -> str:
    return f"r{number}" if number is not None else "nothing"


def stale_reasons(change: ChangeRequest, now: dict[str, Any] | None = None) -> list[str]:
    """How the host, or the hosts and revisions the request covers, differ from when it was
    proposed or last re-confirmed ([]: not stale); a request that went stale when due, why."""
    if not change.is_pending:
        return []
    if change.state == ChangeState.STALE:
        return [change.stale_reason or "it went stale after its approval"]
    return _differences(change, now)


def _differences(change: ChangeRequest, now: dict[str, Any] | None = None) -> list[str]:
    """The host's state against `base`, then the bound hosts and revisions resolved again."""
    reasons = _host_differences(change, now if now is not None else host_state(change.host))
    try:
        resolved = resolve(change)
    except ValidationError as exc:
        return [*reasons, f"its hosts cannot be resolved now: {'; '.join(exc.messages)}"]
    return reasons + differences(change.bound, resolved, by="this approval")


def _host_differences(change: ChangeRequest, now: dict[str, Any]) -> list[str]:
    base = change.base if isinstance(change.base, dict) else {}
    reasons = []
    if base.get("active") != now["active"]:
        reasons.append(f"the active revision is {_rev(now['active'])} now (was {_rev(base.get('active'))})")
    before, after = base.get("aliases") or {}, now["aliases"]
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            reasons.append(f"the alias {name} points at {_rev(after.get(name))} now (was {_rev(before.get(name))})")
    if (base.get("serving") or {}) != now["serving"]:
        reasons.append("the serving set changed")
    return reasons


# --- opening -------------------------------------------------------------------------------------


@transaction.atomic
def change_open_from(needed: ReviewRequired) -> ChangeRequest:
    """Open the request a gated service proposed (installed as the gate's opener)."""
    author = person_of(needed.actor)
    if author is None:
        raise ValidationError("A change request needs an author: act as a person (the CLI's --user).")
    change = ChangeRequest(
        host=needed.host,
        kind=needed.kind,
        params=needed.params,
        summary=needed.summary[:300],
        author=author,
        base=host_state(needed.host),
    )
    change.bound = resolve(change)  # what its approval will cover, shown on its page
    audited_save(
        change,
        action="change.open",
        summary=f"change request: {change.summary}",
        host=change.host,
        data={"kind": change.kind, "params": change.params},
        actor=author,
    )
    notify(change_event(change, "opened"))
    return change


def change_open(
    *, host: Host, kind: str, params: dict[str, Any], when: dict[str, Any] | None = None, actor: AbstractUser | None
) -> ChangeRequest:
    """Propose a change for review, on any host (the API's and the CLI's `open`): the kind's own
    service checks it as if it ran, then opens the request instead of running it. `when`
    (change_schedule's `at` or `in_window`): it runs then once approved, not at once."""
    ensure_role(actor, OPERATOR)
    if person_of(actor) is None:
        raise ValidationError("A change request needs an author: act as a person (the CLI's --user).")
    if kind == ChangeKind.ROLLOUT:
        raise ValidationError(
            {
                "kind": "Start the rollout (rollout start, POST /api/v1/rollouts/): over a host that requires review "
                "it opens its change request."
            }
        )
    if kind not in ChangeKind.values:
        raise ValidationError({"kind": f"The kind is one of {', '.join(ChangeKind.values)}, not {kind!r}."})
    with review_asked():
        try:
            if when:
                change_schedule(kind=kind, host=host, params=params, **when, actor=actor)
            else:
                kind_of(kind).run(host, params, actor, None)
        except ChangeRequested as opened:
            return ChangeRequest.objects.get(pk=opened.change.pk)
    # The service returned before its gate: it had nothing to do (the alias points there already).
    raise ValidationError(f"Nothing to review: {host.name} already is as this change asks.")


# --- deciding --------------------------------------------------------------------------------------


def _locked(change: ChangeRequest) -> ChangeRequest:
    return ChangeRequest.objects.select_for_update(of=("self",)).select_related("host", "author").get(pk=change.pk)


def _record(
    change: ChangeRequest, verdict: str, body: str, actor: AbstractUser | None, data: dict[str, Any] | None = None
) -> None:
    body = (body or "").strip()
    if len(body) > COMMENT_LIMIT:
        raise ValidationError({"comment": f"A comment is at most {COMMENT_LIMIT:,} characters."})
    if "\x00" in body:
        raise ValidationError({"comment": "A comment cannot hold a NUL character."})
    ChangeComment.objects.create(request=change, author=person_of(actor), verdict=verdict, body=body)
    audit_record(
        action=f"change.{verdict}",
        summary=f"change request #{change.pk} ({change.summary}): {Verdict(verdict).label.lower()}",
        obj=change,
        host=change.host,
        data={"state": change.state, **(data or {})},
        actor=actor,
    )


def _as_reviewer(change: ChangeRequest, actor: AbstractUser | None) -> None:
    ensure_role(actor, OPERATOR)
    if person_of(actor) is None:
        raise PermissionDenied("A review needs a person: act as one (the CLI's --user).")
    if change.author_id == actor.pk:
        raise PermissionDenied("Nobody reviews their own request: another operator or admin decides it.")
    if not change.is_pending:
        raise ValidationError(f"Request #{change.pk} is {change.get_state_display().lower()} already.")


def _as_author(change: ChangeRequest, actor: AbstractUser | None) -> None:
    if person_of(actor) is None or change.author_id != actor.pk:
        raise PermissionDenied("Only the request's author may do this.")
    if not change.is_pending:
        raise ValidationError(f"Request #{change.pk} is {change.get_state_display().lower()} already.")


def change_approve(
    *, change: ChangeRequest, comment: str = "", actor: AbstractUser | None, seen: str = ""
) -> ChangeRequest:
    """Approve and run the change (module docstring); answers the request, its operation set
    when the change queued one (a switch). `seen` (the page's form): the request as the approver
    read it (binding.seen_token); re-confirmed since, it is refused."""
    with transaction.atomic():
        change = _locked(change)
        _as_reviewer(change, actor)
        if seen and seen != seen_token(change):
            raise ValidationError(
                f"Request #{change.pk} was re-confirmed since you read it: the hosts and revisions it covers may "
                "differ from what you were shown. Read it again before approving it."
            )
        if change.state == ChangeState.CHANGES_REQUESTED:
            raise ValidationError("Changes were asked for: its author re-confirms it before anyone approves it.")
        if change.state == ChangeState.STALE:
            raise ValidationError(
                f"Request #{change.pk} went stale after its approval and did not run: {change.stale_reason}. "
                "Its author re-confirms it against the hosts as they are now before anyone approves it again."
            )
        stale = stale_reasons(change)
        if stale:
            raise ValidationError(
                f"Request #{change.pk} is stale: {'; '.join(stale)}. Its author re-confirms it against the host "
                "as it is now before anyone approves it."
            )
        if change.author is None:
            raise ValidationError("The request's author is gone: reject it, and open it again as yourself.")
        approval = Approval(change.pk, actor, hosts=bound_hosts(change.bound))  # only the hosts it was shown
        later = when_args(change.when)
        if later is None:
            ran = kind_of(change.kind).run(change.host, change.params, change.author, approval)
            change.operation = ran if isinstance(ran, Operation) else None
            change.rollout = ran if isinstance(ran, Rollout) else None
        else:  # it carries a time: beat runs it then, with this approval
            params = {k: v for k, v in change.params.items() if k != "when"}
            change.scheduled = change_schedule(
                kind=change.kind, host=change.host, params=params, **later, actor=change.author, approval=approval
            )
        change.state, change.decided_by, change.decided_at = ChangeState.APPROVED, actor, timezone.now()
        change.save(update_fields=["state", "decided_by", "decided_at", "operation", "rollout", "scheduled"])
        ran_as = {
            "operation": str(change.operation_id) if change.operation_id else None,
            "rollout": change.rollout_id,
            "scheduled": change.scheduled_id,
        }
        _record(change, Verdict.APPROVE, comment, actor, ran_as)
        notify(change_event(change, "approved"))
    return change


def change_request_changes(*, change: ChangeRequest, comment: str, actor: AbstractUser | None) -> ChangeRequest:
    with transaction.atomic():
        change = _locked(change)
        _as_reviewer(change, actor)
        if not (comment or "").strip():
            raise ValidationError({"comment": "Say what should change."})
        change.state = ChangeState.CHANGES_REQUESTED
        change.save(update_fields=["state"])
        _record(change, Verdict.REQUEST_CHANGES, comment, actor)
    return change


def _close(
    change: ChangeRequest, state: str, verdict: str, comment: str, actor: AbstractUser | None, *, by_author: bool
) -> ChangeRequest:
    """End a request without running it: rejected by a reviewer, or withdrawn by its author."""
    with transaction.atomic():
        change = _locked(change)
        (_as_author if by_author else _as_reviewer)(change, actor)
        change.state, change.decided_by, change.decided_at = state, actor, timezone.now()
        change.save(update_fields=["state", "decided_by", "decided_at"])
        _record(change, verdict, comment, actor)
        if state == ChangeState.REJECTED:
            notify(change_event(change, "rejected"))
    return change


def change_reject(*, change: ChangeRequest, comment: str = "", actor: AbstractUser | None) -> ChangeRequest:
    """Reject: the change never runs; the request is history."""
    return _close(change, ChangeState.REJECTED, Verdict.REJECT, comment, actor, by_author=False)


def change_reconfirm(*, change: ChangeRequest, comment: str = "", actor: AbstractUser | None) -> ChangeRequest:
    """The author proposes the change again against the host as it is now: no longer stale, and
    open for review again after changes were asked for."""
    with transaction.atomic():
        change = _locked(change)
        _as_author(change, actor)
        ensure_role(actor, OPERATOR)
        change.base, change.based_at, change.state = host_state(change.host), timezone.now(), ChangeState.OPEN
        change.bound, change.stale_reason = resolve(change), ""
        change.save(update_fields=["base", "based_at", "state", "bound", "stale_reason"])
        _record(change, Verdict.RECONFIRM, comment, actor, {"base": change.base, "bound": change.bound["hosts"]})
    return change


def approval_targets(change_id: int) -> dict[int, dict[str, Any]] | None:
    """The hosts an approved request covers, by id, with what each gets (installed into the gate)."""
    change = ChangeRequest.objects.filter(pk=change_id).only("bound").first()
    if change is None or bound_hosts(change.bound) is None:
        return None
    return {e["host"]: e for e in change.bound["hosts"] if isinstance(e, dict) and isinstance(e.get("host"), int)}


def approval_recheck(approval: Approval) -> Approval:
    """An approved change about to run later than its approval (a scheduled change when due): its
    request resolved again. The approval with the hosts it binds when nothing differs; else the
    request is marked stale (why, in its conversation and the audit log) and ApprovalStale says
    why: the change does not run, and needs its author's re-confirmation and a fresh approval.
    Installed into the review gate (hardware.review.approval_recheck)."""
    rows = ChangeRequest.objects.select_for_update(of=("self",)).select_related("host", "author")
    change = rows.filter(pk=approval.change_id).first()
    if change is None:
        raise ApprovalStale(f"Its change request #{approval.change_id} is gone: it does not run without one.")
    if change.state != ChangeState.APPROVED:
        raise ApprovalStale(
            f"Change request #{change.pk} is {change.get_state_display().lower()}: it does not run until it is "
            "approved again."
        )
    reasons = _differences(change)
    if not reasons:
        return Approval(change.pk, approval.approver, hosts=bound_hosts(change.bound))
    why = "; ".join(reasons)
    change.state, change.stale_reason = ChangeState.STALE, why[:4000]
    change.save(update_fields=["state", "stale_reason"])
    note = f"Stale when due, it did not run: {why}"[:COMMENT_LIMIT]
    ChangeComment.objects.create(request=change, author=None, verdict=Verdict.COMMENT, body=note)
    audit_record(
        action="change.stale",
        summary=f"change request #{change.pk} ({change.summary}) went stale when due: {why}"[:500],
        obj=change,
        host=change.host,
        data={"reasons": reasons, "bound": change.bound.get("hosts") if isinstance(change.bound, dict) else None},
        actor=None,
    )
    raise ApprovalStale(
        f"Change request #{change.pk} went stale since its approval: {why}. It did not run; it needs a fresh "
        "approval (its author re-confirms it, another person approves it)."
    )


def change_withdraw(*, change: ChangeRequest, comment: str = "", actor: AbstractUser | None) -> ChangeRequest:
    return _close(change, ChangeState.WITHDRAWN, Verdict.WITHDRAW, comment, actor, by_author=True)


def change_comment(*, change: ChangeRequest, comment: str, actor: AbstractUser | None) -> ChangeRequest:
    ensure_role(actor, OPERATOR)
    if not (comment or "").strip():
        raise ValidationError({"comment": "The comment is empty."})
    with transaction.atomic():
        _record(_locked(change), Verdict.COMMENT, comment, actor)
    return change


DECISIONS = {
    Verdict.COMMENT: change_comment,
    Verdict.APPROVE: change_approve,
    Verdict.REQUEST_CHANGES: change_request_changes,
    Verdict.REJECT: change_reject,
    Verdict.RECONFIRM: change_reconfirm,
    Verdict.WITHDRAW: change_withdraw,
}


def change_decide(
    *, change: ChangeRequest, verdict: str, comment: str = "", actor: AbstractUser | None, seen: str = ""
) -> ChangeRequest:
    """One entry point for the page's form, the API and the CLI (`seen`: change_approve's)."""
    if verdict not in DECISIONS:
        raise ValidationError({"verdict": f"One of {', '.join(Verdict.values)}, not {verdict[:40]!r}."})
    if verdict == Verdict.APPROVE:
        return change_approve(change=change, comment=comment, actor=actor, seen=seen)
    return DECISIONS[Verdict(verdict)](change=change, comment=comment, actor=actor)

"""Rollouts across hosts: start one, pause, resume, cancel, and move it on when a switch ends.

The policy (waves, what follows a failure) is serving.rollouts'; this module applies its steps.
A wave's hosts each get the change in a savepoint of their own: a new revision derived from
the revision the host serves at that moment (revision_derive, the same changes on every host)
and a switch to it, or an alias moved to the host's revision with a tag. The rollout moves on
when those switches end: `rollout_operation_ended` is connected to operation_ended
(rollouts.receivers), never polled from a page. With a benchmark gate, the canary's switch
carries it and the canary is done only once the gate passed: `rollout_gate_ended` follows the
gate's end (gate_ended) as the other hosts follow their switches'.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, Unpack

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlpanel.roles import OPERATOR, ensure_role
from core.audit import audit_record
from deployments.choices import GateState, OperationKind, OperationState
from deployments.models import (
    DeploymentRevision,
    ModelAlias,
    ModelVariant,
    Operation,
    SwitchGate,
    active_revision_of,
)
from deployments.services.aliases import ALIAS_NAME, alias_delete, alias_set
from deployments.services.gates import GateRequest, gate_from_params, gate_params
from deployments.services.revisions import revision_derive
from deployments.services.switch import switch_request
from hardware.models import Host
from hardware.review import (
    Approval,
    approval_covers,
    approval_stamp,
    approval_targets,
    review_check,
    reviewed,
)
from hardware.services import TAG_NAME, hosts_tagged
from notifications.events import error_line, rollout_event
from notifications.services import notify
from serving import rollouts as policy

from .models import Rollout, RolloutHost

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

log = logging.getLogger(__name__)
MAX_CHANGES = 50


class RolloutOverlap(ValidationError):
    """A host of the group is already in another open rollout."""


class _DryRun(Exception):
    """Raised to roll a trial back (the change checked on every host before anything happens)."""


# A trial is rolled back whatever happens, so the review gate is not asked there: the rollout asks
# it once for its group (`_review`), after every host took the change in the trial.
TRIAL = Approval(change_id=0, approver=None)
REVIEW_KIND = "rollout"  # the change request's kind for a rollout over a host that requires review


def rollout_approval(rollout: Rollout) -> Approval | None:
    """The approved change request a rollout started from (its waves' switches carry it)."""
    if rollout.change_request is None:
        return None
    return Approval(rollout.change_request, rollout.approved_by)


def change_from_input(
    kind: str,
    *,
    knobs: Any = None,
    env: Any = None,
    model: Any = None,
    message: Any = "",
    alias: Any = "",
    tag: Any = "",
) -> dict[str, Any]:
    """The change as the form, the API and the CLI give it, for `rollout_start` (which checks it)."""
    if kind == Rollout.Kind.ALIAS:
        return {"alias": alias, "tag": tag}
    return {"set": knobs, "set_env": env, "model": model or None, "message": message}


def _clean_change(kind: str, change: Any) -> dict[str, Any]:
    if not isinstance(change, dict):
        raise ValidationError({"change": "The change is an object."})
    if kind == Rollout.Kind.ALIAS:
        alias, tag = str(change.get("alias") or "").strip(), str(change.get("tag") or "").strip()
        if not ALIAS_NAME.match(alias):
            raise ValidationError({"alias": "An alias is 1 to 63 lower-case letters, digits, _ or -."})
        if not tag or len(tag) > 64:
            raise ValidationError({"tag": "Name the revision tag the alias moves to on each host."})
        return {"alias": alias, "tag": tag}
    if kind != Rollout.Kind.REVISION:
        raise ValidationError({"kind": f"A rollout is a {' or an '.join(Rollout.Kind.values)} change."})
    knobs, env = change.get("set") or {}, change.get("set_env") or {}
    if not isinstance(knobs, dict) or not isinstance(env, dict):
        raise ValidationError({"set": "Knobs and variables are given as NAME=VALUE pairs."})
    if len(knobs) + len(env) > MAX_CHANGES:
        raise ValidationError({"set": f"At most {MAX_CHANGES} knobs and variables in one rollout."})
    model = change.get("model") or None
    if model is not None and not ModelVariant.objects.filter(name=str(model)).exists():
        raise ValidationError({"model": f"No model {str(model)[:80]!r} in the catalog."})
    message = str(change.get("message") or "").strip()
    if not message:
        raise ValidationError({"message": "Say what the change is for: it becomes each new revision's message."})
    if not (knobs or env or model):
        raise ValidationError({"set": "A rollout changes something: a knob, a variable or the model."})
    return {"set": knobs, "set_env": env, "model": model and str(model), "message": message[:2000]}


def _clean_gate(kind: str, gate: Any) -> dict[str, Any] | None:
    """The benchmark gate the canary's switch carries, as the rollout keeps it (gate_params)."""
    if gate is None:
        return None
    if not isinstance(gate, GateRequest):
        raise ValidationError({"gate_profile": "A gate is a benchmark profile and its limits (see gate_from_input)."})
    if kind != Rollout.Kind.REVISION:
        raise ValidationError({"gate_profile": "An alias move switches nothing: a benchmark gate has nothing to run."})
    kept: dict[str, Any] = gate_params(gate)["gate"]
    return kept


def _with_host(host: Host, fn: Any) -> Any:
    """Run `fn` for one host; its refusal names the host."""
    try:
        return fn()
    except ValidationError as exc:
        raise ValidationError(f"{host.name}: {'; '.join(exc.messages)}") from exc


def _try_on_every_host(rollout: Rollout, hosts: list[Host]) -> None:
    """Make the change on every host and roll it all back: a refusal on any host refuses the
    rollout before anything happened, with the host's name and its reason."""
    for host in hosts:
        try:
            with transaction.atomic():
                _with_host(host, lambda host=host: _apply(rollout, _fresh(host), switch=False, approval=TRIAL))
                raise _DryRun
        except _DryRun:
            pass


@dataclass(frozen=True)
class Planned:
    """A rollout checked and not recorded: the row unsaved, its hosts, its waves (host names)."""

    rollout: Rollout
    hosts: list[Host]
    waves: list[list[str]]

    def params(self) -> dict[str, Any]:
        """What starts this rollout again (rollout_start's arguments, the canary pinned): a change
        request's or a scheduled change's params."""
        r = self.rollout
        gate = {"gate": r.gate} if r.gate else {}
        return {"group": r.group, "kind": r.kind, "change": r.change, "batch_size": r.batch_size} | {
            "canary": self.waves[0][0],
            **gate,
        }

    def in_order(self) -> list[Host]:
        by_name = {h.name: h for h in self.hosts}
        return [by_name[name] for wave in self.waves for name in wave]


class RolloutInput(TypedDict):
    """What a rollout is asked for (a form, the API, a change request's or a schedule's params)."""

    group: str
    kind: str
    change: Any
    batch_size: Any
    canary: NotRequired[str]
    gate: NotRequired[GateRequest | None]


def rollout_plan(*, actor: AbstractUser | None, trial: bool = True, **request: Unpack[RolloutInput]) -> Planned:
    """Everything rollout_start checks (with `trial`: the change made on every host and undone),
    with nothing recorded. Refused when the group is empty, the plan cannot be made, the gate is
    not a revision rollout's, or the change is refused on any of its hosts."""
    ensure_role(actor, OPERATOR)
    kind, gate = request["kind"], request.get("gate")
    group = (request["group"] or "").strip().lower()
    if not TAG_NAME.match(group):
        raise ValidationError({"group": "Name a host tag (a group of hosts)."})
    hosts = hosts_tagged(group)
    try:
        size = request["batch_size"]
        size = int(size) if isinstance(size, str) and size.strip().isdigit() else size
        waves = policy.plan_waves(
            [h.name for h in hosts], batch_size=size, canary=(request.get("canary") or "").strip()
        )
    except policy.WavePlanError as exc:
        field = "batch_size" if "batch" in str(exc) else "canary" if "canary" in str(exc) else "group"
        raise ValidationError({field: str(exc)}) from None
    rollout = Rollout(
        group=group,
        kind=kind,
        change=_clean_change(kind, request["change"]),
        batch_size=size,
        gate=_clean_gate(kind, gate),
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    rollout.full_clean()
    if trial:
        _try_on_every_host(rollout, hosts)
    return Planned(rollout, hosts, waves)


def _stored(params: Any) -> RolloutInput:
    """rollout_start's arguments from stored params (Planned.params: a change request's, a
    scheduled change's)."""
    if not isinstance(params, dict):
        raise ValidationError("The rollout's parameters are not an object.")
    return {
        "group": str(params.get("group") or ""),
        "kind": str(params.get("kind") or ""),
        "change": params.get("change"),
        "batch_size": params.get("batch_size"),
        "canary": str(params.get("canary") or ""),
        "gate": gate_from_params(params),
    }


def rollout_params_plan(params: dict[str, Any], *, actor: AbstractUser | None, trial: bool = True) -> Planned:
    """rollout_plan from stored params."""
    return rollout_plan(**_stored(params), actor=actor, trial=trial)


def rollout_start_from(
    params: dict[str, Any], *, actor: AbstractUser | None, approval: Approval | None = None
) -> Rollout:
    """rollout_start from stored params (an approved change request, a scheduled change when due)."""
    return rollout_start(**_stored(params), actor=actor, approval=approval)


def _review(planned: Planned, actor: AbstractUser | None, approval: Approval | None) -> None:
    """A person's rollout over a host that requires review opens a change request (on the first
    such host in wave order) and starts nothing; an approved one passes, over exactly the hosts
    its approval covers (a host tagged into the group since is never switched under it)."""
    rollout = planned.rollout
    approval_covers(approval, planned.hosts)
    for host in planned.in_order():
        review_check(
            host=host,
            kind=REVIEW_KIND,
            params=planned.params(),
            summary=f"rollout of {rollout.group}: {rollout.describe_change()}",
            actor=actor,
            approval=approval,
        )


@reviewed
@transaction.atomic
def rollout_start(
    *, actor: AbstractUser | None, approval: Approval | None = None, **request: Unpack[RolloutInput]
) -> Rollout:
    """Record a rollout of `change` over the hosts tagged `group` and start its canary.

    With a `gate` (gate_from_input), the canary's switch carries that benchmark gate and the next
    wave waits for its verdict: a gate that rolls the canary back stops the rollout there.

    Refused, with nothing changed, when rollout_plan refuses it or a host is in another open
    rollout. Over a host that requires review it opens a change request instead (ChangeRequested);
    `approval`: that request approved, recorded on the rollout and carried by its switches."""
    planned = rollout_plan(actor=actor, **request)
    _review(planned, actor, approval)
    rollout, hosts, waves = planned.rollout, planned.hosts, planned.waves
    if approval is not None:
        rollout.change_request, rollout.approved_by = approval.change_id, approval.approver
    rollout.save()
    by_name = {h.name: h for h in hosts}
    parts = [RolloutHost(rollout=rollout, host=by_name[n], wave=i) for i, wave in enumerate(waves) for n in wave]
    try:
        with transaction.atomic():
            RolloutHost.objects.bulk_create(parts)
    except IntegrityError:
        raise RolloutOverlap(_overlap_message(hosts)) from None
    audit_record(
        action="rollout.start",
        summary=f"rollout #{rollout.pk} of {rollout.group} ({rollout.describe_change()}) in {len(waves)} wave(s)",
        obj=rollout,
        data={
            "group": rollout.group,
            "kind": rollout.kind,
            "change": rollout.change,
            "waves": waves,
            **approval_stamp(approval),
        },
        actor=actor,
    )
    notify(rollout_event(rollout, "started"))
    _advance(rollout)
    return rollout


def _overlap_message(hosts: list[Host]) -> str:
    busy = RolloutHost.objects.filter(host__in=hosts, claimed=True).select_related("host", "rollout")
    named = ", ".join(f"{p.host.name} (rollout #{p.rollout_id}, {p.rollout.get_state_display().lower()})" for p in busy)
    return f"Another rollout holds {named}: wait for it to end, or cancel it." if named else "A host is busy."


def _fresh(host: Host) -> Host:
    return Host.objects.select_related("deployment__active_revision").get(pk=host.pk)


def _apply(
    rollout: Rollout,
    host: Host,
    *,
    switch: bool = True,
    gated: bool = False,
    approval: Approval | None = None,
) -> tuple[Any, Any, Operation | None]:
    """The change on one host: (what it had before, what it has now or will, the switch; with
    `gated`, the switch carries the rollout's benchmark gate and this is the gate's first step)."""
    change = rollout.change
    actor = rollout.created_by
    if rollout.kind == Rollout.Kind.ALIAS:
        target = DeploymentRevision.objects.filter(host=host, tag=change["tag"]).first()
        if target is None:
            raise ValidationError(f"No revision of {host.name} is tagged {change['tag']!r}.")
        before = ModelAlias.objects.filter(host=host, name=change["alias"]).select_related("revision").first()
        alias_set(host=host, name=change["alias"], revision=target, actor=actor, approval=approval)
        return (before.revision if before else None), target, None
    current = active_revision_of(host)
    if current is None:
        raise ValidationError(f"{host.name} serves nothing: a rollout changes what a host serves.")
    model = ModelVariant.objects.get(name=change["model"]) if change.get("model") else None
    revision = revision_derive(
        host=host,
        parent=current,
        changes={"set": change.get("set") or None, "set_env": change.get("set_env") or None, "model": model},
        message=f"{change['message']} (rollout #{rollout.pk})" if rollout.pk else change["message"],
        actor=actor,
    )
    if not switch:
        return current, revision, None
    gate = gate_from_params({"gate": rollout.gate}) if gated and rollout.gate else None
    return current, revision, switch_request(revision=revision, gate=gate, actor=actor, approval=approval)


def _put_back(rollout: Rollout, part: RolloutHost) -> Operation | None:
    """Undo the change on a host of the failed wave: a switch back to its previous revision, or
    the alias back where it was (deleted when it was new)."""
    actor = rollout.created_by
    if rollout.kind == Rollout.Kind.ALIAS:
        if part.previous is None:
            alias_delete(host=part.host, name=rollout.change["alias"], actor=actor)
        else:
            alias_set(
                host=part.host,
                name=rollout.change["alias"],
                revision=part.previous,
                actor=actor,
                approval=rollout_approval(rollout),
            )
        return None
    if part.previous is None:
        raise ValidationError(f"{part.host.name} had no revision before: nothing to go back to.")
    return switch_request(revision=part.previous, actor=actor, approval=rollout_approval(rollout))


def _reason(exc: Exception) -> str:
    return "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc) or "permission denied"


def _set(part: RolloutHost, state: str, message: str = "", **fields: Any) -> None:
    part.state, part.message, part.updated_at = state, message[:500], timezone.now()
    for name, value in fields.items():
        setattr(part, name, value)
    part.save()


def _not_approved(rollout: Rollout, host: Host, covered: dict[int, dict[str, Any]] | None) -> str:
    """Why the host's part is not what the rollout's approval covered ("": it is): the host is not
    among its hosts, or it serves another revision than the one its new revision was shown derived
    from (an alias move: the tag is on another revision)."""
    if covered is None:
        return ""
    entry = covered.get(host.pk)
    request = f"change request #{rollout.change_request}"
    if entry is None:
        return f"{host.name} is not among the hosts {request} was approved for: it needs an approval of its own."
    if rollout.kind == Rollout.Kind.ALIAS:
        tagged = DeploymentRevision.objects.filter(host=host, tag=rollout.change.get("tag")).first()
        now, was, what = (tagged.number if tagged else None), entry.get("revision"), "the tag is on"
    else:
        active = active_revision_of(host)
        now, was, what = (active.number if active else None), entry.get("from"), "it serves"
    if now == was:
        return ""
    now_text, was_text = (f"r{n}" if n is not None else "nothing" for n in (now, was))
    return f"stale: {what} {now_text} now, not {was_text} as {request} showed when approved; it needs a fresh approval."


def _start_wave(rollout: Rollout, parts: list[RolloutHost]) -> None:
    covered = approval_targets(rollout.change_request) if rollout.change_request else None
    for part in parts:
        gated = bool(rollout.gate) and part.wave == 0  # the canary proves the change for the rest
        stale = _not_approved(rollout, _fresh(part.host), covered) if covered is not None else ""
        if stale:  # what this host would get is not what was approved: it is not switched
            _set(part, policy.FAILED, "Refused: " + stale)
            continue
        try:
            with transaction.atomic():
                before, after, op = _apply(rollout, _fresh(part.host), gated=gated, approval=rollout_approval(rollout))
        except (ValidationError, PermissionDenied) as exc:  # the starter's role may have been taken away
            _set(part, policy.FAILED, "Refused: " + _reason(exc))
            continue
        label = f"r{after.number}"
        if op is None:
            _set(part, policy.DONE, f"now on {label}", previous=before, target=after)
        else:
            doing = f"switching to {label}" + (", then its benchmark gate" if gated else "")
            _set(part, policy.SWITCHING, doing, previous=before, target=after, operation=op)


def _roll_back(rollout: Rollout, parts: list[RolloutHost]) -> None:
    for part in parts:
        back = f"r{part.previous.number}" if part.previous else "no alias"
        try:
            with transaction.atomic():
                op = _put_back(rollout, part)
        except (ValidationError, PermissionDenied) as exc:
            _set(part, policy.ROLLBACK_FAILED, f"Could not go back to {back}: " + _reason(exc))
            continue
        if op is None:
            _set(part, policy.ROLLED_BACK, f"back on {back}")
        else:
            _set(part, policy.ROLLING_BACK, f"switching back to {back}", operation=op)


def _end(rollout: Rollout, state: str, error: str = "") -> None:
    rollout.state, rollout.finished_at = state, timezone.now()
    rollout.error = error or rollout.error
    rollout.save(update_fields=["state", "finished_at", "error"])
    rollout.hosts.update(claimed=False)
    audit_record(
        action=f"rollout.{state}",
        summary=f"rollout #{rollout.pk} of {rollout.group} {state}" + (f": {error[:200]}" if error else ""),
        obj=rollout,
        actor=None,
    )
    notify(rollout_event(rollout, "finished" if state == Rollout.State.SUCCEEDED else "stopped"))


def _advance(rollout: Rollout) -> None:
    """Apply the policy's steps until it waits or the rollout ends (the caller holds the row)."""
    for _ in range(policy.MAX_HOSTS + 2):  # every turn starts or ends something; this only bounds it
        if not rollout.is_open:
            return
        parts = list(rollout.hosts.select_related("host", "previous"))
        waves: list[list[str]] = []
        for part in parts:
            while len(waves) <= part.wave:
                waves.append([])
            waves[part.wave].append(part.host.name)
        by_name = {p.host.name: p for p in parts}
        step = policy.next_step(waves, {p.host.name: p.state for p in parts}, paused=rollout.state == "paused")
        chosen = [by_name[name] for name in step.hosts]
        if step.action == policy.WAIT:
            return
        if step.action == policy.START:
            _start_wave(rollout, chosen)
        elif step.action == policy.ROLL_BACK:
            rollout.state = Rollout.State.ROLLING_BACK
            rollout.save(update_fields=["state"])
            _roll_back(rollout, chosen)
        elif step.action == policy.FINISH:
            _end(rollout, Rollout.State.SUCCEEDED)
        else:
            failed = [p for p in parts if p.wave == step.wave and p.state == policy.FAILED]
            why = "; ".join(f"{p.host.name}: {p.message}" for p in failed)
            _end(rollout, Rollout.State.FAILED, f"Wave {step.wave} failed ({why}).")


def _locked(rollout: Rollout) -> Rollout:
    return Rollout.objects.select_for_update().get(pk=rollout.pk)


def _ended_part(ops: list[Any], *related: str) -> tuple[Rollout, RolloutHost] | None:
    """The part whose operation is one of `ops`, with its rollout's row locked (None: no part).

    The rollout's row first and no part's: every writer of a rollout's parts holds its rollout
    (pause, resume, cancel, the next wave), so that lock is theirs too. A part locked before its
    rollout could deadlock with a cancel that holds the rollout and ends every part; and the part's
    FOR UPDATE, joined to its host by the parts' ordering, held that host's row as well (its
    probe and heartbeat waited on a rollout taking its next step)."""
    rollout_id = RolloutHost.objects.filter(operation_id__in=ops).values_list("rollout_id", flat=True).first()
    if rollout_id is None:
        return None
    rollout = Rollout.objects.select_for_update().get(pk=rollout_id)
    part = RolloutHost.objects.select_related(*related).filter(rollout=rollout, operation_id__in=ops).first()
    return (rollout, part) if part is not None else None  # its operation changed meanwhile: not ours now


def _move(rollout: Rollout, *, actor: AbstractUser | None, action: str, from_state: str, to_state: str) -> Rollout:
    """Pause or resume: `from_state` -> `to_state`, refused from any other state."""
    ensure_role(actor, OPERATOR)
    rollout = _locked(rollout)
    if rollout.state != from_state:
        wanted = Rollout.State(from_state).label.lower()
        raise ValidationError(
            f"Only a {wanted} rollout can be {action}d; this one is {rollout.get_state_display().lower()}."
        )
    rollout.state = to_state
    rollout.save(update_fields=["state"])
    audit_record(action=f"rollout.{action}", summary=f"rollout #{rollout.pk} {action}d", obj=rollout, actor=actor)
    return rollout


@transaction.atomic
def rollout_pause(*, rollout: Rollout, actor: AbstractUser | None) -> Rollout:
    """Stop before the next wave (the hosts switching now finish their switch)."""
    return _move(rollout, actor=actor, action="pause", from_state=Rollout.State.RUNNING, to_state=Rollout.State.PAUSED)


@transaction.atomic
def rollout_resume(*, rollout: Rollout, actor: AbstractUser | None) -> Rollout:
    """Go on: the next wave starts now when the last one is done."""
    rollout = _move(
        rollout, actor=actor, action="resume", from_state=Rollout.State.PAUSED, to_state=Rollout.State.RUNNING
    )
    _advance(rollout)
    return rollout


@transaction.atomic
def rollout_cancel(*, rollout: Rollout, actor: AbstractUser | None) -> Rollout:
    """End it now: no further wave starts, its hosts are free for another rollout. A switch
    already running finishes (its end is still recorded here); nothing is rolled back."""
    ensure_role(actor, OPERATOR)
    rollout = _locked(rollout)
    if not rollout.is_open:
        raise ValidationError(f"This rollout already ended ({rollout.get_state_display().lower()}).")
    who = getattr(actor, "username", "") or "the system"
    audit_record(action="rollout.cancel", summary=f"rollout #{rollout.pk} cancelled", obj=rollout, actor=actor)
    _end(rollout, Rollout.State.CANCELLED, f"Cancelled by {who}.")
    return rollout


def rollout_operation_ended(*, op: Operation) -> None:
    """A switch of a rollout ended: record the host's new state and take the next step. A gated
    switch (the canary's) is followed to its gate's verdict instead (rollout_gate_ended)."""
    if op.kind != OperationKind.SWITCH or (op.params or {}).get("gated"):
        return
    with transaction.atomic():
        found = _ended_part([op.pk], "host", "previous", "target")
        if found is None:
            return
        rollout, part = found
        ok = op.state == OperationState.SUCCEEDED
        reason = error_line(op.error) or op.state
        if part.state == policy.SWITCHING:
            label = f"r{part.target.number}" if part.target else "the new revision"
            _set(part, policy.DONE, f"now on {label}") if ok else _set(part, policy.FAILED, reason)
        elif part.state == policy.ROLLING_BACK:
            back = f"r{part.previous.number}" if part.previous else "its previous revision"
            _set(part, policy.ROLLED_BACK, f"back on {back}") if ok else _set(part, policy.ROLLBACK_FAILED, reason)
        else:
            return
        _advance(rollout)


def _gate_outcome(gate: SwitchGate) -> tuple[str, str]:
    """The canary's state and message once its benchmark gate ended."""
    where = f"r{gate.revision.number} against r{gate.previous.number}"
    if gate.state == GateState.PASSED:
        return policy.DONE, f"now on r{gate.revision.number}; benchmark gate passed ({where}): {gate.reason}"
    if gate.state == GateState.ROLLED_BACK:
        return policy.FAILED, f"benchmark gate ({where}) rolled it back to r{gate.previous.number}: {gate.reason}"
    return policy.FAILED, f"benchmark gate stopped before a verdict: {gate.reason}"


def rollout_gate_ended(*, gate: SwitchGate) -> None:
    """The canary's benchmark gate ended: the canary is done when it passed, failed otherwise (the
    gate rolled it back itself), and the rollout takes its next step."""
    first = [pk for pk in (gate.baseline_op_id, gate.switch_op_id) if pk]
    with transaction.atomic():
        found = _ended_part(first, "host")
        if found is None:
            return
        rollout, part = found
        if part.state != policy.SWITCHING:
            return
        state, message = _gate_outcome(gate)
        _set(part, state, message)
        _advance(rollout)

"""What an approval binds: the request itself (a digest of its kind, host and params) and the
exact set of hosts it reaches, each with whether it requires review and the revision it gets.

Resolved when a request is opened (or re-confirmed) and kept on it (`ChangeRequest.bound`); the
page shows it to the approver. It is resolved again when the request is approved and when an
approved change runs later (a scheduled one): any difference (a host tagged into the group or out
of it, a host's protection, a revision, the request) is a reason in words, and the request is stale.

Each host's entry: {"host": id, "name", "protected", "revision": the number it gets (a switch, an
alias, a serving change, an alias rollout: the revision with the tag), "from": the number a
rollout's new revision derives from (what it serves)}; a rollout's entries are in wave order.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied, ValidationError

from deployments.models import DeploymentRevision, active_revision_of
from hardware.models import Host
from rollouts.models import Rollout
from rollouts.services import rollout_params_plan

from .choices import ChangeKind
from .models import HostReview

if TYPE_CHECKING:
    from .models import ChangeRequest


def request_digest(kind: str, host_id: Any, params: Any) -> str:
    """The request as it was opened: any change to its kind, host or params changes this."""
    text = json.dumps({"kind": kind, "host": host_id, "params": params}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def seen_token(change: ChangeRequest) -> str:
    """What a reviewer read on the request's page (its binding and the host's state it was proposed
    against): the page's approve form posts it back, and an approval of anything else is refused."""
    text = json.dumps({"bound": change.bound, "base": change.base}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _protected(hosts: list[Host]) -> set[int]:
    return set(HostReview.objects.filter(host__in=hosts, required=True).values_list("host_id", flat=True))


def _rollout_targets(params: dict[str, Any], author: Any) -> list[dict[str, Any]]:
    planned = rollout_params_plan(params, actor=author, trial=False)
    hosts = planned.in_order()
    protected = _protected(hosts)
    kind, change = planned.rollout.kind, planned.rollout.change
    by_name = {h.name: h for h in hosts}
    out = []
    for wave, names in enumerate(planned.waves):
        for host in (by_name[name] for name in names):
            entry: dict[str, Any] = {"host": host.pk, "name": host.name, "protected": host.pk in protected}
            entry["wave"] = wave
            if kind == Rollout.Kind.ALIAS:
                tagged = DeploymentRevision.objects.filter(host=host, tag=change["tag"]).first()
                entry["revision"] = tagged.number if tagged else None
            else:
                fresh = Host.objects.select_related("deployment__active_revision").get(pk=host.pk)
                active = active_revision_of(fresh)
                entry["from"] = active.number if active else None
            out.append(entry)
    return out


def resolve(change: ChangeRequest) -> dict[str, Any]:
    """The request's binding as it resolves now: {"request": digest, "hosts": [...]}; a
    ValidationError when its hosts cannot be resolved (the group gone, its author's role)."""
    params = change.params if isinstance(change.params, dict) else {}
    if change.kind == ChangeKind.ROLLOUT:
        try:
            hosts = _rollout_targets(params, change.author)
        except PermissionDenied as exc:
            raise ValidationError(str(exc) or "its author may no longer start it") from exc
    else:
        host = change.host
        number = params.get("revision")
        hosts = [
            {
                "host": host.pk,
                "name": host.name,
                "protected": bool(_protected([host])),
                "revision": number if isinstance(number, int) and not isinstance(number, bool) else None,
            }
        ]
    return {"request": request_digest(change.kind, change.host_id, params), "hosts": hosts}


def bound_hosts(bound: Any) -> frozenset[int] | None:
    """The ids of the hosts a binding covers; None for a request opened before approvals bound them."""
    hosts = bound.get("hosts") if isinstance(bound, dict) else None
    if not isinstance(hosts, list):
        return None
    return frozenset(e["host"] for e in hosts if isinstance(e, dict) and isinstance(e.get("host"), int))


def _rev(number: Any) -> str:
    return f"r{number}" if number is not None else "nothing"


def differences(bound: Any, now: dict[str, Any], *, by: str) -> list[str]:
    """How `now` (resolve) differs from `bound` in words ([]: it does not); `by` names what
    covered the bound set ("this approval", "the request as opened")."""
    if bound_hosts(bound) is None:
        return ["it was opened before approvals bound the hosts and revisions they cover"]
    reasons = []
    if bound.get("request") != now["request"]:
        reasons.append("the request itself changed since it was opened")
    before = {e["host"]: e for e in bound["hosts"] if isinstance(e, dict)}
    after = {e["host"]: e for e in now["hosts"]}
    for pk, entry in after.items():
        if pk not in before:
            what = "requires review" if entry["protected"] else "does not require review"
            reasons.append(f"the group now holds host {entry['name']} ({what}), which {by} did not cover")
    for pk, entry in before.items():
        if pk not in after:
            reasons.append(f"the group no longer holds host {entry.get('name')}, which {by} covered")
    for pk, entry in after.items():
        old = before.get(pk)
        if old is None:
            continue
        name = entry["name"]
        if bool(old.get("protected")) != entry["protected"]:
            reasons.append(f"{name} {'now requires' if entry['protected'] else 'no longer requires'} review")
        if old.get("revision") != entry.get("revision"):
            reasons.append(f"{name} would get {_rev(entry.get('revision'))} now (was {_rev(old.get('revision'))})")
        if old.get("from") != entry.get("from"):
            reasons.append(
                f"{name} serves {_rev(entry.get('from'))} now: its new revision would derive from it "
                f"(was {_rev(old.get('from'))})"
            )
    return reasons


def described(bound: Any) -> list[dict[str, Any]]:
    """The bound hosts for the request's page: each entry with what it gets, in words."""
    hosts = bound.get("hosts") if isinstance(bound, dict) else None
    out = []
    for entry in hosts if isinstance(hosts, list) else []:
        if not isinstance(entry, dict):
            continue
        if "from" in entry:
            gets = f"a new revision derived from {_rev(entry.get('from'))}"
        else:
            gets = _rev(entry.get("revision"))
        out.append({**entry, "gets": gets})
    return out

"""Usage of the front doors per host, UTC day, inference key and served model: requests, prompt
and completion tokens, errors.

A host's front door sends its running totals (hostagent.frontdoor.usage.UsageLedger rows); the
panel keeps, per (host, day, key, model), the largest value of each count it was sent. Totals
only grow, so a report sent twice, or an older one resent from the agent's outbox after a newer
one, changes nothing.

A host books usage only to what its door could have served: a key of the key table (revoked ones
too, for a door keeps their earlier totals; `""` is the open door's) and a model the host serves,
named as its door names it (host_serving.model_name). A door keeps a model's totals for 31 days
after the model leaves its set, so "serves" means: a revision of this host by its door name, or a
name this host has booked before. Anything else refuses the whole report (ValidationError) and
books nothing: the agent API checked the counts' bounds before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from deployments.host_serving import model_name
from deployments.models import DeploymentRevision, InferenceKey, UsageDay
from hardware.models import Host
from serving.agent_reports import UsageTotal

COUNTS = ("requests", "prompt_tokens", "completion_tokens", "errors")
REVISION_SUFFIX = re.compile(r"-r(\d+)$")
OPEN_KEY = ""  # the key name of an open door's usage (hostagent.frontdoor.usage.OPEN_KEY)
SHOWN = 5  # unknown names an error lists


def _named(what: str, names: set[str]) -> str:
    shown = ", ".join(repr(n) for n in sorted(names)[:SHOWN])
    return f"{what}: {shown}" + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")


def usage_rows_check(*, host: Host, rows: list[UsageTotal]) -> None:
    """ValidationError unless every row names a key of the key table (or the open door's `""`) and
    a model this host serves or has booked before (see the module's docstring)."""
    keys = {r.key for r in rows} - {OPEN_KEY}
    unknown = keys - set(InferenceKey.objects.filter(name__in=keys).values_list("name", flat=True))
    if unknown:
        raise ValidationError(_named("usage names keys the panel has no record of", unknown))
    models = {r.model for r in rows}
    models -= set(UsageDay.objects.filter(host=host, model__in=models).values_list("model", flat=True).distinct())
    numbers = {int(m.group(1)) for name in models if (m := REVISION_SUFFIX.search(name))}
    if models and numbers:
        revisions = DeploymentRevision.objects.filter(host=host, number__in=numbers).select_related("model_variant")
        models -= {model_name(revision) for revision in revisions}
    if models:
        raise ValidationError(_named(f"usage names models {host.name} does not serve", models))


@transaction.atomic
def usage_record(*, host: Host, rows: Iterable[UsageTotal]) -> int:
    """Store checked usage rows (deployments.agent_api.bodies); answers how many changed.
    ValidationError, with nothing stored, for a key or model the host may not book to."""
    rows = list(rows)
    if not rows:
        return 0
    Host.objects.select_for_update().filter(pk=host.pk).first()  # one report of a host at a time
    usage_rows_check(host=host, rows=rows)
    day_of = {r.day: date.fromisoformat(r.day) for r in rows}
    stored = {(u.day, u.key, u.model): u for u in UsageDay.objects.filter(host=host, day__in=day_of.values())}
    numbers = {int(m.group(1)) for r in rows if (m := REVISION_SUFFIX.search(r.model))}
    revisions = dict(DeploymentRevision.objects.filter(host=host, number__in=numbers).values_list("number", "pk"))
    now = timezone.now()
    new: list[UsageDay] = []
    grown: list[UsageDay] = []
    for row in rows:
        at = (day_of[row.day], row.key, row.model)
        found = stored.get(at)
        if found is None:
            match = REVISION_SUFFIX.search(row.model)
            found = UsageDay(
                host=host,
                day=day_of[row.day],
                key=row.key,
                model=row.model,
                revision_id=revisions.get(int(match.group(1))) if match else None,
                updated_at=now,
                **{c: getattr(row, c) for c in COUNTS},
            )
            stored[at] = found
            new.append(found)
        elif any(getattr(row, c) > getattr(found, c) for c in COUNTS):
            for c in COUNTS:
                setattr(found, c, max(getattr(row, c), getattr(found, c)))
            found.updated_at = now
            grown.append(found)
    UsageDay.objects.bulk_create(new)
    UsageDay.objects.bulk_update(grown, [*COUNTS, "updated_at"])
    return len(new) + len(grown)


def usage_since(days: int) -> date:
    return timezone.now().date() - timedelta(days=max(days, 1) - 1)


def usage_totals(*, by: tuple[str, ...], days: int = 31, host: Host | None = None) -> list[dict[str, Any]]:
    """Totals over the last `days` UTC days grouped by `by` (of "day", "key", "host__name",
    "model", "revision__number"), the busiest first (per day: the newest day first)."""
    rows = UsageDay.objects.filter(day__gte=usage_since(days))
    if host is not None:
        rows = rows.filter(host=host)
    first = ("-day",) if "day" in by else ()  # the newest day first, then the busiest
    totals = rows.values(*by).annotate(**{c: Sum(c) for c in COUNTS}).order_by(*first, "-requests", *by)
    return list(totals)


def usage_grand_total(*, days: int = 31) -> dict[str, int]:
    found = UsageDay.objects.filter(day__gte=usage_since(days)).aggregate(**{c: Sum(c) for c in COUNTS})
    return {c: found[c] or 0 for c in COUNTS}

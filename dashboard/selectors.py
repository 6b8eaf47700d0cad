"""The dashboard's reads: every host's card fingerprint in one SQL query, and the cards that
changed, built from one statement that also gives their fingerprints.

A card's fingerprint is an md5 the database computes over what the card's template shows: the
host's HOST_FIELDS, its deployment's DEPLOYMENT_FIELDS with the active revision's
REVISION_FIELDS and model name, how many GPUs it has, the first GPUS_SHOWN GPUs' GPU_FIELDS each
with its latest raw telemetry sample's id (samples are never edited: a new sample is a new id),
the first running operation's OP_FIELDS with its revision's number, and its front door's
card line (FrontDoor.card) (PostgreSQL has md5;
Django gives SQLite one). `card_version` joins it with what Python decides: whether the host is
online and, while it is not, how long ago it last reported, and its CPU and RAM figures as the
card rounds them (`usage_view`: noise sends no card).

A poll reads one row per host (`card_index`); cards are built only for the hosts whose version
the page does not show (`dashboard_cards`), from one statement that reads their rows and their
fingerprints together, so a rendering is never filed under the fingerprint of other data. This
replaced fingerprints hashed in Python from every host's, GPU's and operation's rows
(bench/bench_dashboard.py). tests/deployments/test_dashboard_fingerprints.py checks that the
fingerprint moves with each field it covers and that no other column changes what a card shows.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection
from django.db.models import F, Model, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import MD5, Cast, JSONArray
from django.utils import timezone

from deployments.choices import ACTIVE_STATES
from deployments.models import DeploymentRevision, FrontDoor, Operation
from deployments.selectors.hosts import (
    CARD_GPU,
    CARD_SAMPLE,
    CARD_UNREAD,
    GPUS_SHOWN,
    GpuCard,
    HostCard,
    host_list,
    usage_view,
)
from hardware.models import GPU, GpuSample, Host, online_at
from hardware.selectors import LATEST_USAGE, latest_usage, reported_ago

# What a card shows, and so what its fingerprint covers (with the revision's model name, the
# host's GPU count and each GPU's latest raw sample id).
HOST_FIELDS = ("name", "address", "queue", "is_demo", "declared", "nvml_available", "engine_state", "engine_metrics")
DEPLOYMENT_FIELDS = ("serving",)
REVISION_FIELDS = ("id", "number", "engine", "engine_version", "served_name")
GPU_FIELDS = tuple(f for f in CARD_GPU if f != "host_id")
OP_FIELDS = ("id", "kind", "state", "stage", "progress", "error", "revision_id")
_REV = "deployment__active_revision__"


# What a card shows beyond its host's own row and active revision, in SQL that PostgreSQL and
# SQLite both read: each subquery reads the outer host row only, so it annotates any Host
# queryset. {array}, {agg_open} and {agg_close} are each database's JSON array and ordered JSON
# aggregate (`_json`); tables and column lists come from the models and the tuples above.
SUBQUERIES = {
    "gpu_count": "(SELECT count(*) FROM {gpu} WHERE host_id = {host}.id)",
    "gpus": """(SELECT {agg_open}{array}({gpu_columns},
            (SELECT s.id FROM {sample} s WHERE s.gpu_id = g.id AND s.resolution_s = 0 ORDER BY s.ts DESC LIMIT 1)
        ){agg_close} FROM (SELECT * FROM {gpu} WHERE host_id = {host}.id ORDER BY {index} LIMIT {gpus_shown}) g)""",
    "operation": """(SELECT {array}({operation_columns}, r.number){text}
        FROM {operation} o LEFT JOIN {revision} r ON r.id = o.revision_id
        WHERE o.host_id = {host}.id AND o.state IN ({active}) ORDER BY o.created_at, o.id LIMIT 1)""",
    "door": "(SELECT d.{door_card}{text} FROM {door} d WHERE d.{door_host} = {host}.id)",
}


def _json(vendor: str) -> dict[str, str]:
    if vendor == "postgresql":
        agg_close = " ORDER BY g.index)::text"
        return {"array": "json_build_array", "agg_open": "json_agg(", "agg_close": agg_close, "text": "::text"}
    # SQLite 3.40 has no ORDER BY in aggregates: json_group_array keeps its subquery's order, and
    # dashboard_cards sorts the GPUs by index anyway.
    return {"array": "json_array", "agg_open": "json_group_array(", "agg_close": ")", "text": ""}


def _columns(alias: str, model: type[Model], names: Sequence[str]) -> str:
    q = connection.ops.quote_name
    return ", ".join(f"{alias}.{q(model._meta.get_field(name).column)}" for name in names)


@functools.cache
def _subqueries(vendor: str) -> dict[str, str]:
    q = connection.ops.quote_name
    names = {
        **_json(vendor),
        "host": q(Host._meta.db_table),
        "gpu": q(GPU._meta.db_table),
        "sample": q(GpuSample._meta.db_table),
        "revision": q(DeploymentRevision._meta.db_table),
        "operation": q(Operation._meta.db_table),
        "door": q(FrontDoor._meta.db_table),
        "door_card": q(FrontDoor._meta.get_field("card").column),
        "door_host": q(FrontDoor._meta.get_field("host").column),
        "index": q("index"),  # a keyword in SQLite
        "gpus_shown": GPUS_SHOWN,
        "active": ", ".join(f"'{state}'" for state in ACTIVE_STATES),
        "gpu_columns": _columns("g", GPU, GPU_FIELDS),
        "operation_columns": _columns("o", Operation, OP_FIELDS),
    }
    return {name: text.format(**names) for name, text in SUBQUERIES.items()}


def card_sql() -> dict[str, Any]:
    """Annotations for a Host queryset: `card_fp`, the fingerprint (an md5's 32 hex digits), and
    what it covers that a card is built from beyond the host's row and its active revision:
    `card_gpus` and `card_op` (JSON text), `card_gpu_count`."""
    # Our own SQL from model metadata; no value from a request is in it.
    raw = {name: RawSQL(sql, (), TextField()) for name, sql in _subqueries(connection.vendor).items()}  # noqa: S611
    shown = [
        *(F(name) for name in HOST_FIELDS),
        *(F(f"deployment__{name}") for name in DEPLOYMENT_FIELDS),
        *(F(f"{_REV}{name}") for name in REVISION_FIELDS),
        F(f"{_REV}model_variant__name"),
        *raw.values(),
    ]
    return {
        "card_fp": MD5(Cast(JSONArray(*shown), TextField())),
        "card_gpus": raw["gpus"],
        "card_op": raw["operation"],
        "card_gpu_count": raw["gpu_count"],
        "card_door": raw["door"],
    }


def card_version(fingerprint: str, last_heartbeat: datetime | None, now: datetime, usage: dict[str, str]) -> str:
    """Ten hex digits: the stored data's fingerprint, whether the host is online and, while it is
    not, how long ago it last reported, as its card says it ("3 hours": it changes hourly then),
    and its CPU and RAM figures as the card rounds them (`usage_view`: noise sends no card)."""
    online = online_at(last_heartbeat, now)
    ago = "" if online or last_heartbeat is None else reported_ago(last_heartbeat, now)
    shown = (fingerprint, online, ago, sorted(usage.items()))
    return hashlib.blake2b(repr(shown).encode(), digest_size=5).hexdigest()


@dataclass
class CardIndex:
    """Every host's card version, in the dashboard's order."""

    versions: dict[int, str] = field(default_factory=dict)  # host id -> card_version
    names: dict[int, str] = field(default_factory=dict)


def card_index() -> CardIndex:
    """One query: each host's id, name, last heartbeat, fingerprint and latest CPU and RAM figures."""
    now = timezone.now()
    index = CardIndex()
    rows = (
        Host.objects.annotate(card_fp=card_sql()["card_fp"], **latest_usage())
        .order_by("is_demo", "name")
        .values_list("id", "name", "last_heartbeat", "card_fp", *LATEST_USAGE)
    )
    for host_id, name, last_heartbeat, fingerprint, *usage in rows:
        index.names[host_id] = name
        shown = usage_view(dict(zip(LATEST_USAGE, usage, strict=True)))
        index.versions[host_id] = card_version(fingerprint, last_heartbeat, now, shown)
    return index


def _instance(model: type[Model], values: dict[str, Any]) -> Any:
    """A model instance from these column values as JSON has them (the others deferred): each
    made its field's type again (a float 0.0 comes back from PostgreSQL's JSON as 0)."""
    fields = [f for f in model._meta.concrete_fields if f.attname in values]
    return model.from_db(
        DEFAULT_DB_ALIAS, [f.attname for f in fields], [f.to_python(values[f.attname]) for f in fields]
    )


def _gpu(row: Sequence[Any], host_id: int) -> GPU:
    """A GPU from its GPU_FIELDS (and latest sample id) as the fingerprint's JSON has them."""
    gpu: GPU = _instance(GPU, {**dict(zip(GPU_FIELDS, row, strict=False)), "host_id": host_id})
    return gpu


def _operation(text: str | None, host: Host) -> Operation | None:
    if not text:
        return None
    *values, revision_number = json.loads(text)
    op: Operation = _instance(Operation, {**dict(zip(OP_FIELDS, values, strict=True)), "host_id": host.pk})
    if op.revision_id is not None:
        op.revision = _instance(DeploymentRevision, {"id": op.revision_id, "number": revision_number})
    op.host = host
    return op


def dashboard_cards(host_ids: Sequence[int]) -> list[HostCard]:
    """The cards of these hosts, in this order, each with the version of exactly what it was
    built from: 2 queries (the hosts with their revisions, GPUs, operation and fingerprint; the
    GPUs' latest samples), none for no hosts."""
    if not host_ids:
        return []
    now = timezone.now()
    hosts = {h.pk: h for h in host_list().defer(*CARD_UNREAD).filter(pk__in=host_ids).annotate(**card_sql())}
    by_index = GPU_FIELDS.index("index")
    gpu_rows = {pk: sorted(json.loads(h.card_gpus or "[]"), key=lambda row: row[by_index]) for pk, h in hosts.items()}
    latest = [row[-1] for rows in gpu_rows.values() for row in rows if row[-1] is not None]
    samples = {s.pk: s for s in GpuSample.objects.only(*CARD_SAMPLE).filter(pk__in=latest)} if latest else {}
    cards = []
    for host_id in host_ids:
        host = hosts.get(host_id)
        if host is None:
            continue  # gone since the index was read
        gpus = [GpuCard(_gpu(row, host_id), samples.get(row[-1])) for row in gpu_rows[host_id]]
        card = HostCard(host, gpus, _operation(host.card_op, host), host.card_gpu_count - len(gpus))  # type: ignore[attr-defined]
        card.door = json.loads(host.card_door) if host.card_door else None  # type: ignore[attr-defined]
        card.version = card_version(host.card_fp, host.last_heartbeat, now, card.usage)  # type: ignore[attr-defined]
        cards.append(card)
    return cards

"""The dashboard's card fingerprints, read as plain rows: which cards changed is known before
any card is built.

A card's fingerprint covers exactly what its template shows (the fields below, whether the
host is online, and how long ago it last reported while offline), which telemetry sample is
each GPU's latest (samples are never edited, so a new sample is a new id), and the host's CPU
and memory as the card shows them: rounded (`usage_view`), so their noise sends no card.
`HostCard.version` computes the same fingerprint from built objects;
tests/deployments/test_dashboard_fingerprints.py checks that both agree and that a field left
out here changes nothing a card shows.

The dashboard's poll reads three small queries of tuples here (hosts with their active
revision, GPUs with their latest sample's id, running operations) and builds model objects
only for the cards it has to render: at a hundred hosts that turned ~2,000 model objects per
poll into a handful (bench/bench_dashboard.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, F, Model, OuterRef, QuerySet, Subquery, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from deployments.choices import ACTIVE_STATES
from deployments.models import Operation
from hardware.models import GPU, GpuSample, Host, online_at, used_memory
from hardware.selectors import LATEST_USAGE, latest_usage, reported_ago

# What a card shows, and so what its fingerprint covers.
HOST_FIELDS = (
    "id",
    "name",
    "address",
    "queue",
    "is_demo",
    "declared",
    "nvml_available",
    "engine_state",
    "engine_metrics",
)
REVISION_FIELDS = ("id", "number", "engine", "engine_version", "served_name", "model_variant_id")
GPU_FIELDS = ("id", "host_id", "index", "name", "memory_bytes", "power_limit_w")
OP_FIELDS = ("id", "host_id", "kind", "state", "stage", "progress", "error", "result", "created_at", "revision_id")
_REV = "deployment__active_revision__"
# The GPUs a card, a table row, the host page and the API's host list name, by index; a host that
# reported more (stored before its agent's reports were bounded) shows "and N more": 5,000 GPU rows
# made its page 13 MiB.
GPUS_SHOWN = 64
PEERS_SHOWN = 16  # a GPU's P2P peers the host page lists


CPU_STEP = 5  # a card's CPU busy figure, in steps of this many percent
RAM_STEPS = 100  # a card's RAM used figure, in this many steps of the host's total
GIB = 1024**3


def usage_view(latest: Mapping[str, Any]) -> dict[str, str]:
    """What a card and a table row show of a host's latest CPU and memory sample (`latest` holds
    hardware.selectors.LATEST_USAGE), rounded so that noise changes nothing: CPU busy to
    CPU_STEP %, RAM used to a RAM_STEPS-th of the total (a quarter GiB of 24). {} when none."""
    cpu_pct, mem_total = latest.get("usage_cpu_pct"), latest.get("usage_mem_total")
    view: dict[str, str] = {}
    if cpu_pct is not None:
        cpu = CPU_STEP * round(min(100.0, max(0.0, cpu_pct)) / CPU_STEP)
        view.update(cpu=f"{cpu}%", cpu_pct=str(cpu))
    used = used_memory(mem_total, latest.get("usage_mem_available"))
    if mem_total and used is not None:
        steps = round(RAM_STEPS * min(1.0, used / mem_total))
        view.update(
            ram=f"{mem_total * steps / RAM_STEPS / GIB:.1f} / {mem_total / GIB:.1f} GiB",
            ram_pct=f"{100 * steps // RAM_STEPS}",
        )
    return view


def fingerprint(
    host: Sequence[Any],
    last_heartbeat: datetime | None,
    revision: Sequence[Any],
    variant_name: str,
    gpus: Iterable[Sequence[Any]],
    op: Sequence[Any],
    op_revision_number: int | None,
    now: datetime,
    usage: dict[str, str] | None = None,
) -> str:
    """Ten hex digits over what a card shows: the values of HOST_FIELDS, REVISION_FIELDS (empty
    without an active revision), GPU_FIELDS plus each GPU's latest sample id, the first running
    operation's OP_FIELDS (with "rolled back" read from its result), and `usage_view`'s figures."""
    online = online_at(last_heartbeat, now)
    ago = "" if online or last_heartbeat is None else reported_ago(last_heartbeat, now)
    if op:
        result = op[OP_FIELDS.index("result")]
        rolled_back = bool(result.get("rolled_back")) if isinstance(result, dict) else False
        op = (*(v for f, v in zip(OP_FIELDS, op, strict=True) if f != "result"), rolled_back)
    parts = (
        tuple(host),
        online,
        ago,
        tuple(revision),
        variant_name,
        tuple(map(tuple, gpus)),
        op,
        op_revision_number,
        tuple(sorted((usage or {}).items())),
    )
    return hashlib.blake2b(repr(parts).encode(), digest_size=5).hexdigest()


def values_of(obj: Model | None, fields: Sequence[str]) -> tuple[Any, ...]:
    return () if obj is None else tuple(getattr(obj, f) for f in fields)


def shown_gpus(gpus: QuerySet[GPU]) -> QuerySet[GPU]:
    """The first GPUS_SHOWN GPUs of each host by index, each with `gpus_of_host`, how many its host has."""
    return gpus.annotate(
        nth=Window(RowNumber(), partition_by=[F("host_id")], order_by=F("index").asc()),
        gpus_of_host=Window(Count("id"), partition_by=[F("host_id")]),
    ).filter(nth__lte=GPUS_SHOWN)


def gpus_part(rows: Sequence[Sequence[Any]], more: int) -> list[Sequence[Any]]:
    """The GPUs' part of a fingerprint: their rows, and how many more the host has."""
    return [*rows, ("more", more)] if more else list(rows)


def latest_sample_id() -> Subquery:
    """A GPU's latest raw sample's id, for `.annotate(latest_sample_id=...)` on GPUs."""
    return Subquery(GpuSample.objects.filter(gpu=OuterRef("pk"), resolution_s=0).order_by("-ts").values("pk")[:1])


@dataclass
class CardIndex:
    """Every host's card fingerprint, in the dashboard's order, and the rows read for them."""

    versions: dict[int, str] = field(default_factory=dict)  # host id -> fingerprint
    names: dict[int, str] = field(default_factory=dict)
    gpus: dict[int, list[tuple[Any, ...]]] = field(default_factory=dict)  # GPU_FIELDS + latest sample id
    gpus_more: dict[int, int] = field(default_factory=dict)  # host id -> GPUs past GPUS_SHOWN
    operations: dict[int, Operation] = field(default_factory=dict)


def card_index() -> CardIndex:
    """Three queries of plain rows: hosts (with the active revision, its model's name and the
    latest CPU and memory figures), GPUs with their latest raw sample's id, and the running
    operations (the first per host)."""
    now = timezone.now()
    index = CardIndex()
    gpu_rows = shown_gpus(GPU.objects.annotate(latest_sample_id=latest_sample_id())).order_by("host_id", "index")
    for row in gpu_rows.values_list(*GPU_FIELDS, "latest_sample_id", "gpus_of_host"):
        index.gpus.setdefault(row[1], []).append(row[:-1])
        index.gpus_more[row[1]] = row[-1] - len(index.gpus[row[1]])
    ops = (
        Operation.objects.filter(state__in=ACTIVE_STATES)
        .select_related("revision")
        .only(*OP_FIELDS, "revision__number", "revision__host_id")
        .order_by("created_at")
    )
    for op in ops:
        index.operations.setdefault(op.host_id, op)
    hosts = (
        Host.objects.annotate(**latest_usage())
        .order_by("is_demo", "name")
        .values_list(
            *LATEST_USAGE,
            *HOST_FIELDS,
            "last_heartbeat",
            *(_REV + f for f in REVISION_FIELDS),
            _REV + "model_variant__name",
        )
    )
    for usage_row in hosts:
        usage, row = usage_row[: len(LATEST_USAGE)], usage_row[len(LATEST_USAGE) :]
        host_id, split = row[0], len(HOST_FIELDS)
        revision = row[split + 1 : -1] if row[split + 1] is not None else ()
        op = index.operations.get(host_id)
        index.names[host_id] = row[1]
        index.versions[host_id] = fingerprint(
            row[:split],
            row[split],
            revision,
            row[-1] or "" if revision else "",
            gpus_part(index.gpus.get(host_id, ()), index.gpus_more.get(host_id, 0)),
            values_of(op, OP_FIELDS),
            op.revision.number if op is not None and op.revision is not None else None,
            now,
            usage_view(dict(zip(LATEST_USAGE, usage, strict=True))),
        )
    return index

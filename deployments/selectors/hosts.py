"""Reads that put hosts beside their revisions and operations: the dashboard's host cards, what
a host serves, what fits on its GPUs, its recent operations and benchmarks. They own
select_related/prefetch_related, so pages issue a fixed number of queries whatever the number
of hosts. (Reads of hosts alone, telemetry and why a host is offline, are `hardware.selectors`.)"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from django.db.models import Count, F, OuterRef, Prefetch, QuerySet, Subquery, TextField, Window
from django.db.models.functions import MD5, Cast, JSONArray, RowNumber

from deployments.choices import ACTIVE_STATES
from deployments.models import BenchmarkRun, ModelVariant, Operation, active_revision_of
from deployments.planning import gpu_spec
from deployments.runtime_bridge import launch_knobs
from hardware.models import GPU, GpuSample, Host, used_memory
from hardware.selectors import LATEST_USAGE, latest_usage, offline_reason, reported_ago
from serving.planner import CatalogModel, GpuSpec, WhatFitsCell, what_fits
from serving.planner.whatfits import DEFAULT_CONTEXTS

# The GPUs a card, a table row, the host page and the API's host list name, by index; a host that
# reported more (stored before its agent's reports were bounded) shows "and N more": 5,000 GPU rows
# made its page 13 MiB.
GPUS_SHOWN = 64
PEERS_SHOWN = 16  # a GPU's P2P peers the host page lists


def shown_gpus(gpus: QuerySet[GPU]) -> QuerySet[GPU]:
    """The first GPUS_SHOWN GPUs of each host by index, each with `gpus_of_host`, how many its host has."""
    return gpus.annotate(
        nth=Window(RowNumber(), partition_by=[F("host_id")], order_by=F("index").asc()),
        gpus_of_host=Window(Count("id"), partition_by=[F("host_id")]),
    ).filter(nth__lte=GPUS_SHOWN)


def latest_sample_id() -> Subquery:
    """A GPU's latest raw sample's id, for `.annotate(latest_sample_id=...)` on GPUs."""
    return Subquery(GpuSample.objects.filter(gpu=OuterRef("pk"), resolution_s=0).order_by("-ts").values("pk")[:1])


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


@dataclass
class GpuCard:
    gpu: GPU
    sample: GpuSample | None

    @property
    def mem_pct(self) -> float | None:
        if self.sample is None or self.sample.mem_used_bytes is None or not self.gpu.memory_bytes:
            return None
        return 100.0 * self.sample.mem_used_bytes / self.gpu.memory_bytes

    @property
    def peers(self) -> tuple[list[tuple[str, Any]], int]:
        """The host page's P2P column: the first PEERS_SHOWN peers and how many more there are."""
        peers = self.gpu.peers if isinstance(self.gpu.peers, dict) else {}
        shown = [(peer, p if isinstance(p, dict) else {}) for peer, p in list(peers.items())[:PEERS_SHOWN]]
        return shown, len(peers) - len(shown)

    # Display values, computed once here: the dashboard renders hundreds of GPUs every few
    # seconds and Django's floatformat/filesizeformat filters dominated its render time.
    @property
    def view(self) -> dict[str, str]:
        s, g = self.sample, self.gpu
        view = {"memory": _gib(g.memory_bytes)}
        if s is None:
            return view
        mem = self.mem_pct
        view.update(
            mem_pct=f"{mem:.0f}" if mem is not None else "–",
            mem_width=bar_width(mem),
            mem_used=_gib(s.mem_used_bytes) if s.mem_used_bytes is not None else "",
            util=f"{s.util_pct:.0f}" if s.util_pct is not None else "–",
            util_width=bar_width(s.util_pct),
            power=f"{s.power_w:.0f} W" if s.power_w is not None else "– W",
            limit=f" / {g.power_limit_w:.0f} W" if g.power_limit_w else "",
            temp=f"{s.temp_c:.0f} °C" if s.temp_c is not None else "– °C",
        )
        return view


def bar_width(pct: float | None) -> str:
    """A bar's filled share as a whole percentage 0-100: the bar's class (`w37`, static/css/panel.css)
    sets its width, as the Content-Security-Policy allows no inline style attributes."""
    return f"{min(100.0, max(0.0, pct or 0.0)):.0f}"


def _gib(value: float | None) -> str:
    return "" if value is None else f"{value / 1024**3:.1f} GiB"


@dataclass(frozen=True)
class ServingStatus:
    """What the host serves, honestly: "Serving" only while the engine runs and is healthy."""

    serving: bool
    label: str  # the badge beside an active revision that is not serving
    css: str
    note: str = ""


def serving_status(host: Host) -> ServingStatus:
    st = host.engine_state if isinstance(host.engine_state, dict) else {}
    revision = active_revision_of(host)
    label = f"r{revision.number}" if revision is not None else "the active revision"
    if host.is_demo and not host.is_online:
        return ServingStatus(False, "demo", "demo", f"A demo host: nothing runs here; {label} is an example history.")
    if not host.is_online:
        return ServingStatus(False, "unknown", "off", f"{host.name} is offline: whether {label} still runs is unknown.")
    if not st:
        return ServingStatus(False, "not reported", "off", "The host has not reported its engine yet.")
    if not st.get("running"):
        deployment = getattr(host, "deployment", None)
        if revision is not None and deployment is not None and not deployment.serving:
            return ServingStatus(
                False, "stopped", "off", f"{label} is the active revision; it was stopped on purpose (Start serves it)."
            )
        phase = st.get("phase")
        return ServingStatus(
            False,
            "not serving",
            "error",
            f"{label} is the active revision, but its engine is stopped" + (f" ({phase})." if phase else "."),
        )
    running_label = st.get("revision_label")
    if running_label and revision is not None and str(running_label) != f"r{revision.number}":
        return ServingStatus(
            False, "not serving", "error", f"The engine runs {running_label}, not the active revision {label}."
        )
    health = st.get("health")
    if health == "healthy" or (health is None and st.get("healthy")):
        return ServingStatus(True, "serving", "ok")
    if health == "starting":
        return ServingStatus(False, "starting", "info", f"{label}'s engine is starting.")
    return ServingStatus(False, "unhealthy", "error", f"{label}'s engine runs but does not answer its health check.")


HOT_C = 85.0  # a GPU this hot (or hotter) needs a look: most throttle a few degrees above


@dataclass
class HostCard:
    host: Host
    gpus: list[GpuCard] = field(default_factory=list)
    operation: Operation | None = None
    gpus_more: int = 0  # the host's GPUs past the GPUS_SHOWN in `gpus`
    # The dashboard's fingerprint of what this card was built from (dashboard.selectors):
    # equal versions render the same card, so the dashboard sends only cards whose version the
    # browser does not have. "" where no one caches the card (the host page, the API).
    version: str = ""
    door: dict[str, Any] | None = None  # the front door's last report in a line (FrontDoor.card)

    @property
    def gpus_more_label(self) -> str:
        """What follows a list cut at GPUS_SHOWN ("and 4,936 more GPUs"); "" when all are listed."""
        n = self.gpus_more
        return f"and {n:,} more GPU{'' if n == 1 else 's'}" if n > 0 else ""

    @property
    def serving(self) -> ServingStatus:
        return serving_status(self.host)

    @property
    def offline_reason(self) -> str:
        return offline_reason(self.host)

    @property
    def offline_since(self) -> str:
        """How long ago the host last reported, in one unit ("2 hours", "5 minutes"): the card
        of a host that is away changes when this does, once a minute at most."""
        last = self.host.last_heartbeat
        return reported_ago(last) if last is not None else ""

    @cached_property
    def attention(self) -> str:
        """Why a person should look at this host now, or "": its agent is away, its active
        revision is not serving, or a GPU runs at HOT_C or more. The dashboard's "needs
        attention" filter shows only these."""
        host = self.host
        if host.is_demo:
            return ""
        if not host.is_online:
            return "offline"
        if active_revision_of(host) is not None and not self.serving.serving and self.serving.label != "starting":
            return self.serving.label
        hottest = self.gpu_summary.get("temp_sort", -1)  # as the card and the table show it
        return f"GPU at {hottest} °C" if hottest >= HOT_C else ""

    @cached_property
    def gpu_summary(self) -> dict[str, Any]:
        """The dashboard table's GPU columns: which GPUs, mean utilisation, memory used of
        all, power drawn, the hottest; each with a number to sort by ("–" and -1: unknown)."""
        gpus = self.gpus
        if not gpus:
            return {}
        names = sorted({g.gpu.name.removeprefix("NVIDIA ") for g in gpus})
        count = len(gpus) + self.gpus_more
        samples = [g.sample for g in gpus if g.sample is not None]
        utils = [s.util_pct for s in samples if s.util_pct is not None]
        used = [s.mem_used_bytes for s in samples if s.mem_used_bytes is not None]
        power = [s.power_w for s in samples if s.power_w is not None]
        temps = [s.temp_c for s in samples if s.temp_c is not None]
        total = sum(g.gpu.memory_bytes or 0 for g in gpus)
        util = sum(utils) / len(utils) if utils else None
        mem_pct = 100.0 * sum(used) / total if used and total else None
        return {
            "label": f"{count}× {names[0]}" if len(names) == 1 else f"{count} GPUs: {', '.join(names)}",
            "count": count,
            "util": f"{util:.0f}%" if util is not None else "–",
            "util_sort": round(util, 1) if util is not None else -1,
            "util_width": bar_width(util),
            "memory": f"{sum(used) / 1024**3:.0f} / {total / 1024**3:.0f} GiB" if used else "–",
            "mem_sort": round(mem_pct, 1) if mem_pct is not None else -1,
            "mem_width": bar_width(mem_pct),
            "power": f"{sum(power):.0f} W" if power else "–",
            "power_sort": round(sum(power)) if power else -1,
            "temp": f"{max(temps):.0f} °C" if temps else "–",
            "temp_sort": round(max(temps)) if temps else -1,
        }

    @cached_property
    def usage(self) -> dict[str, str]:
        """The host's CPU busy and RAM used, rounded (`usage_view`)."""
        return usage_view({name: getattr(self.host, name, None) for name in LATEST_USAGE})


def host_list() -> QuerySet[Host]:
    """Hosts with their active revision and the latest CPU and memory figures a card shows."""
    return (
        Host.objects.select_related("deployment__active_revision__model_variant")
        .annotate(**latest_usage())
        .order_by("is_demo", "name")
    )


# What no card shows, left unread on the dashboard: decoding these JSON columns for a hundred
# hosts (the model's whole architecture and GGUF header, eight GPUs' peer tables) took most of
# its poll's time (bench/bench_dashboard.py); of GPUs and samples it reads only what a card
# shows. A template that starts showing anything else adds a query per card or GPU, which
# tests/deployments/test_dashboard_polls.py counts.
CARD_UNREAD = (
    "probe_mismatches",
    "engine_installs",
    "model_dirs",
    *(f"deployment__active_revision__{f}" for f in ("knobs", "env", "extras", "message")),
    *(
        f"deployment__active_revision__model_variant__{f}"
        for f in ("hub_files", "arch", "gguf_kv", "sampling_presets", "min_engine_versions", "source")
    ),
)


CARD_SAMPLE = ("gpu_id", "util_pct", "mem_used_bytes", "power_w", "temp_c")  # what a card shows of a sample
CARD_GPU = ("id", "host_id", "index", "name", "memory_bytes", "power_limit_w")  # and of a GPU


def host_cards(*, hosts: QuerySet[Host] | None = None) -> list[HostCard]:
    """Hosts with their GPUs, each GPU's latest raw sample, and the running operation: 4 queries.
    Without `hosts`: every host (the API's list), leaving CARD_UNREAD unread. (The dashboard reads
    its cards through dashboard.selectors.)"""
    gpu_qs = shown_gpus(GPU.objects.annotate(latest_sample_id=latest_sample_id())).order_by("index")
    sample_qs = GpuSample.objects.all()
    gpus: dict[int, list[GPU]] = {}
    if hosts is None:  # every host: GPUs grouped here (prefetch's bookkeeping cost more than the rows)
        hosts_list = list(host_list().defer(*CARD_UNREAD))
        for gpu in gpu_qs.only(*CARD_GPU).filter(host_id__in=[h.pk for h in hosts_list]):
            gpus.setdefault(gpu.host_id, []).append(gpu)
        sample_qs = sample_qs.only(*CARD_SAMPLE)
    else:
        hosts_list = list(hosts.prefetch_related(Prefetch("gpus", queryset=gpu_qs.select_related("gpu_type"))))
        gpus = {h.pk: list(h.gpus.all()) for h in hosts_list}
    sample_ids = [g.latest_sample_id for listed in gpus.values() for g in listed if g.latest_sample_id]
    samples = {s.pk: s for s in sample_qs.filter(pk__in=sample_ids)} if sample_ids else {}
    ops: dict[int, Operation] = {}
    active = Operation.objects.filter(host__in=[h.pk for h in hosts_list], state__in=ACTIVE_STATES)
    # benchmark_run_pk: the API's host list names a running benchmark's run (api.serialize)
    ops_read = active.select_related("revision", "requested_by").annotate(benchmark_run_pk=F("benchmarkrun__id"))
    for op in ops_read.order_by("created_at"):
        ops.setdefault(op.host_id, op)
    for h in hosts_list:
        if h.pk in ops:
            ops[h.pk].host = h  # the host is at hand: its operation's pages and API name it
    return [
        HostCard(
            host=h,
            gpus=[GpuCard(gpu=g, sample=samples.get(g.latest_sample_id)) for g in gpus.get(h.pk, [])],
            operation=ops.get(h.pk),
            gpus_more=_more(gpus.get(h.pk, [])),
        )
        for h in hosts_list
    ]


def _more(gpus: list[GPU]) -> int:
    """How many GPUs the host has past these (each read with its host's count, `shown_gpus`)."""
    return gpus[0].gpus_of_host - len(gpus) if gpus else 0  # type: ignore[attr-defined]


# --- what fits ---------------------------------------------------------------------------------

ENGINE_FOR_FORMAT = {"hf": "vllm", "gguf": "llama.cpp", "ollama": "ollama"}


@dataclass
class WhatFitsRow:
    model: str
    engine: str
    layout: str
    gpus_used: int
    cells: list[WhatFitsCell]


@dataclass
class WhatFitsTable:
    contexts: tuple[int, ...]
    rows: list[WhatFitsRow]
    models: int
    elapsed_ms: float

    @property
    def context_labels(self) -> list[str]:
        return [f"{c // 1024}K" if c % 1024 == 0 else f"{c:,}" for c in self.contexts]


def catalog_models(variants: Iterable[ModelVariant]) -> list[CatalogModel]:
    """Planner inputs for model variants; each planned with the engine its format implies."""
    models = []
    for v in variants:
        engine = ENGINE_FOR_FORMAT.get(v.format, "vllm")
        knobs = launch_knobs(engine=engine, model=v, knobs={})
        models.append(CatalogModel(name=v.name, arch=v.model_arch, engine=engine, knobs=knobs, **v.weight_facts))
    return models


def catalog_digest() -> str:
    """What the catalog's models are now, in one query of one md5 per model (over every column:
    a model edited in place changes it too)."""
    columns = [F(f.attname) for f in ModelVariant._meta.concrete_fields]
    rows = ModelVariant.objects.order_by("pk").annotate(row=MD5(Cast(JSONArray(*columns), TextField())))
    return hashlib.blake2b(",".join(rows.values_list("row", flat=True)).encode(), digest_size=16).hexdigest()


def what_fits_digest(*, gpus: Sequence[GPU], contexts: tuple[int, ...] = DEFAULT_CONTEXTS) -> str:
    """Everything `host_what_fits` reads, as a digest (1 query): equal digests, equal tables."""
    specs = _specs(gpus)
    return hashlib.blake2b(repr((specs, contexts, catalog_digest())).encode(), digest_size=16).hexdigest()


def _specs(gpus: Sequence[GPU]) -> tuple[GpuSpec, ...]:
    return tuple(gpu_spec(g) for g in sorted(gpus, key=lambda g: g.index))


def host_what_fits(*, gpus: Sequence[GPU], contexts: tuple[int, ...] = DEFAULT_CONTEXTS) -> WhatFitsTable:
    """Every catalog model x valid layout x a few context lengths on these GPUs (1 query)."""
    started = time.perf_counter()
    specs = _specs(gpus)
    models = catalog_models(ModelVariant.objects.order_by("is_demo", "family", "name"))
    rows: dict[tuple[str, str, str], WhatFitsRow] = {}
    if specs:
        for cell in what_fits(specs, models, contexts=contexts):
            key = (cell.model, cell.engine, cell.layout)
            if key not in rows:
                rows[key] = WhatFitsRow(cell.model, cell.engine, cell.layout, cell.gpus_used, [])
            rows[key].cells.append(cell)
    return WhatFitsTable(
        contexts=tuple(contexts),
        rows=list(rows.values()),
        models=len(models),
        elapsed_ms=(time.perf_counter() - started) * 1000.0,
    )


# --- host page ---------------------------------------------------------------------------------


def host_recent_operations(*, host: Host, limit: int = 10) -> list[Operation]:
    """The host page's list: kind, state, who, when. Results, logs and params stay unread (a
    host's agent once stored a 30 MB result; the operation's own page reads it)."""
    ops = Operation.objects.filter(host=host).defer("result", "log", "params")
    return list(ops.select_related("revision", "requested_by").order_by("-created_at")[:limit])


def host_benchmark_runs(*, host: Host, limit: int = 10) -> list[BenchmarkRun]:
    return list(
        BenchmarkRun.objects.filter(revision__host=host)
        .defer("raw")  # every request's timings: the run's own page plots them
        .select_related("revision")
        .order_by("-created_at")[:limit]
    )

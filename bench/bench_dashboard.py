"""How fast the dashboard's poll and a host's page answer: 100 hosts x 8 GPUs, and one host as a
lab's real one looks after a while.

The dashboard: 100 hosts with 8 GPUs each, HOURS of telemetry of each GPU and of each host's CPU
and memory (one-minute rollups before the last hour, raw 10 s samples for the last hour), an
active revision and engine metrics on every host and a running operation on some. It requests
the dashboard's live partial (what the page polls every 5 s) through Django's test Client,
signed in, N times, and prints the median and p95 server time, the bytes and the queries per
request: as a page's first poll (every card), then as the page polls (naming the cards it
shows, static/js/host_cards.js) with nothing changed, and with CHANGED hosts changed before
each poll (a new telemetry round on each of their GPUs), as cards and as the table view's rows.

The host page: one more host with 8 H200 GPUs (with their P2P table), a day of GPU, engine, CPU
and memory samples at the retention policy's density (raw, one per
CONTROLPANEL_TELEMETRY_INTERVAL_S, kept CONTROLPANEL_TELEMETRY_RAW_RETENTION_H hours), REVISIONS
revisions, OPERATIONS operations (with logs and results) and a few benchmark runs: requested N
times with a new telemetry round before each request (its charts drawn again each time), then N
times as it is (its charts read from the cache, as a reload, the page's own 30 s refresh or a
second viewer before the agent's next report).

The lines starting "==" are the figures issue 26 asks for, p50 and p95: the poll with CHANGED
of 100 hosts changed and the host page. The machine's load average is printed with them.

    python bench/bench_dashboard.py                 # embedded default: SQLite in a throwaway folder
    DATABASE_URL=postgres://... python bench/bench_dashboard.py   # cleans up its hosts afterwards
    N=100 HOSTS=100 GPUS=8 HOURS=24 CHANGED=5 REVISIONS=50 OPERATIONS=200 python bench/bench_dashboard.py
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
if "DATABASE_URL" not in os.environ:
    os.environ["CONTROLPANEL_DATA_DIR"] = tempfile.mkdtemp(prefix="bench-dashboard-")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "testserver")

N = int(os.environ.get("N", "50"))
HOSTS = int(os.environ.get("HOSTS", "100"))
GPUS = int(os.environ.get("GPUS", "8"))
HOURS = int(os.environ.get("HOURS", "24"))
CHANGED = int(os.environ.get("CHANGED", "5"))
REVISIONS = int(os.environ.get("REVISIONS", "50"))
OPERATIONS = int(os.environ.get("OPERATIONS", "200"))
RAW_STEP_S = 10
SAMPLE_COLUMNS = ("gpu_id", "ts", "resolution_s", "util_pct", "mem_used_bytes", "power_w", "temp_c")
USAGE_COLUMNS = (
    "host_id",
    "ts",
    "resolution_s",
    "cpu_pct",
    "load_1",
    "load_5",
    "load_15",
    "mem_total_bytes",
    "mem_available_bytes",
    "swap_total_bytes",
    "swap_used_bytes",
)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _figures(times: list[float]) -> str:
    return f"p50 {statistics.median(times):.1f} ms, p95 {_percentile(times, 0.95):.1f} ms"


def insert_rows(table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
    """Many rows at once: COPY on PostgreSQL, executemany elsewhere (bulk_create of 1.4 million
    samples took five minutes on a busy 2-core box)."""
    from django.db import connection

    count = 0
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
                    count += 1
            return count
        adapt = connection.ops.adapt_datetimefield_value
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('%s' for _ in columns)})"  # noqa: S608 - our own table and column names
        batch: list[Sequence[Any]] = []
        for row in rows:
            batch.append([adapt(v) if isinstance(v, datetime) else v for v in row])
            if len(batch) == 10_000:
                cursor.executemany(sql, batch)
                count, batch = count + len(batch), []
        cursor.executemany(sql, batch)
        return count + len(batch)


def gpu_rows(gpu_ids: Sequence[int], since: datetime, raw_since: datetime, until: datetime, step_s: int) -> Any:
    """Rollups (one a minute) from `since`, then raw samples every `step_s` from `raw_since`: in
    time order, every GPU's sample of a round together, as agents' reports and the retention
    task store them (the order rows lie on disk steers PostgreSQL's choice of index)."""
    t = since
    while t < raw_since:
        for gpu_id in gpu_ids:
            yield (gpu_id, t, 60, 55.0, 18 * 1024**3, 250.0, 61.0)
        t += timedelta(seconds=60)
    k = 0
    while t <= until:
        for gpu_id in gpu_ids:
            yield (gpu_id, t, 0, 40.0 + k % 50, 20 * 1024**3 + k % 7 * 1024**2, 200.0 + k % 80, 60.0 + (k + gpu_id) % 9)
        t += timedelta(seconds=step_s)
        k += 1


def usage_rows(host_ids: Sequence[int], since: datetime, raw_since: datetime, until: datetime, step_s: int) -> Any:
    """Each host's CPU and memory, kept the same way as GPU samples (`gpu_rows`)."""
    t, k = since, 0
    while t <= until:
        raw = t >= raw_since
        for host_id in host_ids:
            yield (
                host_id,
                t,
                0 if raw else 60,
                20.0 + (k + host_id) % 60,
                1.5,
                1.2,
                1.0,
                256 * 1024**3,
                (100 + k % 50) * 1024**3,
                0,
                0,
            )
        t += timedelta(seconds=step_s if raw else 60)
        k += 1


def build_fleet(tag: str, now: datetime) -> tuple[list[Any], list[Any]]:
    """HOSTS hosts x GPUS GPUs for the dashboard, as before: returns the hosts and their GPUs."""
    from deployments.models import Deployment, DeploymentRevision, ModelVariant, Operation
    from hardware.models import GPU, GpuSample, Host, HostSample

    variant = ModelVariant.objects.get(name="Qwen3.6-35B-A3B-AWQ-4bit")
    started = time.perf_counter()
    Host.objects.bulk_create(
        [
            Host(
                name=f"bench-{tag}-{i:03d}",
                queue=f"host.bench-{tag}-{i:03d}",
                nvml_available=True,
                last_heartbeat=now if i % 10 else now - timedelta(hours=1),
                engine_state={"running": True, "health": "healthy", "engine": "vllm", "revision_label": "r1"},
                engine_metrics={"requests_running": i % 5, "requests_waiting": i % 3, "kv_cache_usage": 0.37},
            )
            for i in range(HOSTS)
        ]
    )
    hosts = list(Host.objects.filter(name__startswith=f"bench-{tag}-").order_by("name"))
    DeploymentRevision.objects.bulk_create(
        [
            DeploymentRevision(host=h, number=1, engine="vllm", model_variant=variant, knobs={}, message="bench")
            for h in hosts
        ]
    )
    by_host = {r.host_id: r for r in DeploymentRevision.objects.filter(host__in=hosts)}
    Deployment.objects.bulk_create([Deployment(host=h, active_revision=by_host[h.pk]) for h in hosts])
    Operation.objects.bulk_create(
        [
            Operation(kind="switch", host=h, revision=by_host[h.pk], state="running" if i % 10 else "queued")
            for i, h in enumerate(hosts)
            if i % 5 == 0
        ]
    )
    GPU.objects.bulk_create(
        [
            GPU(host=h, index=g, name="NVIDIA GeForce RTX 3090", memory_bytes=24 * 1024**3, compute_capability="8.6")
            for h in hosts
            for g in range(GPUS)
        ]
    )
    gpus = list(GPU.objects.filter(host__in=hosts).order_by("host_id", "index"))
    print(f"{len(hosts)} hosts, {len(gpus)} GPUs, {len(hosts)} revisions in {time.perf_counter() - started:.1f}s")
    window = (now - timedelta(hours=HOURS), now - timedelta(hours=1), now, RAW_STEP_S)
    for what, model, columns, rows in (
        ("GPU", GpuSample, SAMPLE_COLUMNS, gpu_rows([g.pk for g in gpus], *window)),
        ("CPU and memory", HostSample, USAGE_COLUMNS, usage_rows([h.pk for h in hosts], *window)),
    ):
        started = time.perf_counter()
        stored = insert_rows(model._meta.db_table, columns, rows)
        print(f"{stored:,} {what} samples ({HOURS} h: rollups, last hour raw) in {time.perf_counter() - started:.1f}s")
    return hosts, gpus


def build_lab_host(tag: str, now: datetime, user: Any) -> Any:
    """One host as a lab's looks after a while: 8 H200s with their P2P table, a day of raw GPU and
    engine samples, REVISIONS revisions, OPERATIONS operations, benchmark runs, engine installs."""
    from django.conf import settings

    from deployments.models import BenchmarkRun, Deployment, DeploymentRevision, ModelVariant, Operation
    from hardware.models import GPU, EngineSample, GpuSample, Host, HostSample

    started = time.perf_counter()
    host = Host.objects.create(
        name=f"bench-{tag}-lab",
        queue=f"host.bench-{tag}-lab",
        address="10.0.0.7",
        nvml_available=True,
        last_heartbeat=now,
        cpu_model="AMD EPYC 9354",
        cpu_cores=64,
        ram_bytes=512 * 1024**3,
        driver_version="570.124",
        cuda_version="12.8",
        engine_state={
            "running": True,
            "health": "healthy",
            "engine": "vllm",
            "revision_label": f"r{REVISIONS}",
            "port": 8000,
            "carried": {"llama.cpp": "b6000"},
        },
        engine_metrics={"requests_running": 3, "requests_waiting": 1, "kv_cache_usage": 0.41},
        engine_installs={
            "vllm": {
                v: {"installed_at": f"2025-0{i + 1}-01T00:00:00Z", "path": f"/opt/vllm-{v}"}
                for i, v in enumerate(("0.10.0", "0.11.0"))
            },
        },
    )
    variants = list(ModelVariant.objects.order_by("name")[:8])
    revisions = []
    for n in range(1, REVISIONS + 1):
        revisions.append(
            DeploymentRevision(
                host=host,
                number=n,
                engine="vllm",
                engine_version="0.11.0",
                model_variant=variants[n % len(variants)],
                knobs={"tensor_parallel_size": 8, "max_model_len": 32768, "gpu_memory_utilization": 0.9},
                env={"VLLM_ATTENTION_BACKEND": "FLASHINFER"},
                served_name=f"model-{n}",
                port=8000,
                author=user,
                message=f"revision {n}: " + "tuning the KV cache and the batch size " * 4,
                created_at=now - timedelta(hours=REVISIONS - n),
            )
        )
    DeploymentRevision.objects.bulk_create(revisions)
    revisions = list(DeploymentRevision.objects.filter(host=host).order_by("number"))
    Deployment.objects.create(host=host, active_revision=revisions[-1])
    kinds = ("switch", "benchmark", "probe", "install", "stop")
    ops = [
        Operation(
            kind=kinds[i % len(kinds)],
            host=host,
            revision=revisions[i % len(revisions)],
            requested_by=user,
            state="succeeded" if i % 7 else "failed",
            stage="done",
            progress=1.0,
            log="".join(f"line {k}: loading shard {k} of 64\n" for k in range(200)),
            result={"rolled_back": i % 7 == 0, "levels": [{"c": c, "tps": 100.0 * c} for c in range(16)]},
            created_at=now - timedelta(minutes=5 * (OPERATIONS - i)),
        )
        for i in range(OPERATIONS)
    ]
    Operation.objects.bulk_create(ops)
    benchmark_ops = [op for op in ops if op.kind == "benchmark"][-10:]
    BenchmarkRun.objects.bulk_create(
        [
            BenchmarkRun(
                revision=op.revision,
                operation=op,
                profile_name="quick",
                engine="vllm",
                status="succeeded",
                results={
                    "levels": [
                        {"concurrency": c, "aggregate_tps": 90.0 * c, "ttft_ms": {"p50": 80.0}} for c in (1, 4, 16)
                    ]
                },
                raw=[{"ttft_ms": 80.0 + k, "e2e_ms": 900.0 + k} for k in range(500)],
            )
            for op in benchmark_ops
        ]
    )
    peers = {str(j): {"read": "ok", "write": "ok", "nvlink": 18, "topology": "NV18"} for j in range(8)}
    GPU.objects.bulk_create(
        [
            GPU(
                host=host,
                index=g,
                uuid=f"GPU-{uuid.uuid4()}",
                name="NVIDIA H200",
                memory_bytes=141 * 1024**3,
                compute_capability="9.0",
                pcie_gen=5,
                pcie_width=16,
                power_limit_w=700.0,
                nvlink_active_links=18,
                peers={k: v for k, v in peers.items() if k != str(g)},
            )
            for g in range(8)
        ]
    )
    gpus = list(GPU.objects.filter(host=host).order_by("index"))
    step = settings.TELEMETRY_INTERVAL_S
    day = timedelta(hours=settings.TELEMETRY_RAW_RETENTION_H)
    rows = insert_rows(
        GpuSample._meta.db_table, SAMPLE_COLUMNS, gpu_rows([g.pk for g in gpus], now - day, now - day, now, step)
    )
    engine_rows = (
        (host.pk, now - day + timedelta(seconds=step * k), 0, k % 5, k % 3, 0.4, 1000.0 * k)
        for k in range(int(day.total_seconds()) // step)
    )
    rows += insert_rows(
        EngineSample._meta.db_table,
        (
            "host_id",
            "ts",
            "resolution_s",
            "requests_running",
            "requests_waiting",
            "kv_cache_usage",
            "generation_tokens_total",
        ),
        engine_rows,
    )
    rows += insert_rows(
        HostSample._meta.db_table, USAGE_COLUMNS, usage_rows([host.pk], now - day, now - day, now, step)
    )
    print(
        f"the lab host: {len(gpus)} GPUs, {rows:,} GPU, engine, CPU and memory samples (raw every {step} s for "
        f"{settings.TELEMETRY_RAW_RETENTION_H} h), "
        f"{REVISIONS} revisions, {OPERATIONS} operations in {time.perf_counter() - started:.1f}s"
    )
    return host, gpus


def main() -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from deployments.services.catalog import catalog_load
    from hardware.models import Host

    call_command("migrate", verbosity=0)
    catalog_load()
    tag = uuid.uuid4().hex[:6]
    now = timezone.now()
    user = get_user_model().objects.create_superuser(f"bench-{tag}", password=uuid.uuid4().hex)
    try:
        hosts, gpus = build_fleet(tag, now)
        lab, lab_gpus = build_lab_host(tag, now, user)
        started = time.perf_counter()
        with connection.cursor() as cursor:
            # The state autovacuum keeps a live database in: statistics for the planner, the
            # visibility map set. Left to autovacuum, it would vacuum the fresh 1.5 million rows
            # while the requests are timed.
            cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")
        print(f"vacuumed and analysed in {time.perf_counter() - started:.1f}s")
        run(client_for(user), hosts, gpus, lab, lab_gpus)
    finally:
        if "DATABASE_URL" in os.environ:  # a real database: leave nothing behind
            Host.objects.filter(name__startswith=f"bench-{tag}-").delete()
            user.delete()


def client_for(user: Any) -> Any:
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


def run(client: Any, hosts: list[Any], gpus: list[Any], lab: Any, lab_gpus: list[Any]) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse
    from django.utils import timezone

    from hardware.models import GpuSample, Host

    sql_ms: list[float] = []

    cpu_ms: list[float] = []  # this process's CPU time: steadier than the clock on a busy machine

    def get(url: str, **headers: str) -> tuple[Any, float, int]:
        with CaptureQueriesContext(connection) as ctx:
            t0, c0 = time.perf_counter(), time.process_time()
            response = client.get(url, **headers)
            elapsed = (time.perf_counter() - t0) * 1000.0
            cpu_ms.append((time.process_time() - c0) * 1000.0)
        assert response.status_code == 200, response.status_code
        sql_ms.append(sum(float(q["time"]) for q in ctx.captured_queries) * 1000.0)
        return response, elapsed, len(ctx.captured_queries)

    def new_round(host_gpus: Iterable[Any], i: int) -> None:
        GpuSample.objects.bulk_create(
            [
                GpuSample(gpu=g, ts=timezone.now(), util_pct=i % 100, mem_used_bytes=20 * 1024**3, power_w=300)
                for g in host_gpus
            ]
        )

    cards_url = reverse("dashboard:cards")
    online = [h.pk for i, h in enumerate(hosts) if i % 10]  # every tenth host's agent is away
    Host.objects.filter(pk__in=online).update(last_heartbeat=timezone.now())
    client.get(cards_url, HTTP_HX_REQUEST="true")  # warm up (template loading, first connection)
    sql_ms.clear()
    measured = [get(cards_url, HTTP_HX_REQUEST="true") for _ in range(N)]
    full = measured[-1][0].content.decode()
    print(
        f"dashboard partial, every card ({len(hosts)} hosts x {GPUS} GPUs, {len(full) / 1024:.0f} KiB): "
        f"{_figures([m[1] for m in measured])}, queries/request {sorted({m[2] for m in measured})} "
        f"(SQL median {statistics.median(sql_ms):.1f} ms) over {N} requests"
    )
    listed = re.search(r'data-hosts="([^"]+)"', full)
    assert listed is not None, "the page names no cards"
    shown = dict(re.findall(r'data-host="([^"]+)" data-v="([^"]+)"', full))
    by_host_gpus: dict[int, list[Any]] = {}
    for g in gpus:
        by_host_gpus.setdefault(g.host_id, []).append(g)
    figures: dict[str, str] = {}

    def polls(n: int, changed: int, view: str = "cards") -> None:
        times, sizes, queries, sent = [], [], [], []
        sql_ms.clear()
        cpu_ms.clear()
        for i in range(n):
            Host.objects.filter(pk__in=online).update(last_heartbeat=timezone.now())  # their agents' heartbeats
            for h in hosts[(i * changed) % len(hosts) :][:changed]:  # a new telemetry round on their GPUs
                new_round(by_host_gpus[h.pk], i)
            table = "view=table&" if view == "table" else ""
            url = f"{cards_url}?{table}hosts={listed.group(1)}&have={'.'.join(shown.values())}"
            response, elapsed, count = get(url, HTTP_HX_REQUEST="true")
            got = dict(re.findall(r'data-host="([^"]+)" data-v="([^"]+)"', response.content.decode()))
            # The changed hosts' cards, and an offline host's whenever its "last heartbeat ... ago" moved.
            assert changed <= len(got) <= changed + len(hosts) - len(online), f"{len(got)} sent, {changed} changed"
            shown.update(got)
            times.append(elapsed)
            sent.append(len(got))
            sizes.append(len(response.content))
            queries.append(count)
        figures[f"{view}:{changed}"] = f"{_figures(times)} (this process's CPU p50 {statistics.median(cpu_ms):.1f} ms)"
        print(
            f"dashboard poll ({view}), {changed} of {len(hosts)} hosts changed: {max(sizes) / 1024:.1f} KiB at most "
            f"({max(sent)} {'rows' if view == 'table' else 'cards'}), {figures[f'{view}:{changed}']}, "
            f"queries/request {sorted(set(queries))} (SQL median {statistics.median(sql_ms):.1f} ms) over {n} polls"
        )

    polls(N, 0)
    polls(N, CHANGED)
    polls(N, CHANGED, view="table")  # the same fingerprints: the page's rows are its cards' hosts

    host_url = reverse("hardware:host_detail", args=[lab.name])
    client.get(host_url)  # warm up
    for fresh in (True, False):
        sql_ms.clear()
        cpu_ms.clear()
        times, queries = [], []
        for i in range(N):
            if fresh:  # as if the agent had just reported: the charts are drawn again
                new_round(lab_gpus, i)
            response, elapsed, count = get(host_url)
            times.append(elapsed)
            queries.append(count)
        mode = "a new telemetry round before each" if fresh else "charts from the cache"
        figures[mode] = f"{_figures(times)} (this process's CPU p50 {statistics.median(cpu_ms):.1f} ms)"
        print(
            f"host page ({len(lab_gpus)} GPUs, a day of samples, {REVISIONS} revisions, {OPERATIONS} operations, "
            f"{len(response.content) / 1024:.0f} KiB), {mode}: {figures[mode]}, queries/request "
            f"{sorted(set(queries))} (SQL median {statistics.median(sql_ms):.1f} ms) over {N} requests"
        )
    load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"== load average {load} on {os.cpu_count()} CPUs")
    print(f"== dashboard poll, {CHANGED} of {len(hosts)} hosts changed (cards): {figures[f'cards:{CHANGED}']}")
    for mode in ("a new telemetry round before each", "charts from the cache"):
        print(f"== host page, {mode}: {figures[mode]}")


if __name__ == "__main__":
    main()

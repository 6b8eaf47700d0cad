"""How fast the dashboard's live partial answers with 100 hosts x 8 GPUs and a day of telemetry.

Creates 100 hosts with 8 GPUs each, a day of telemetry of each GPU and of each host's CPU and
memory (one-minute rollups, as the retention task leaves them, for the day before the last
hour; raw 10 s samples for the last hour), an active revision and engine metrics on every
host and a running operation on some; then
requests the dashboard's live partial (what the page polls every 5 s) through Django's test
Client, signed in, N times, and prints the median and p95 server time, the bytes and the
queries per request: once as a page's first poll (every card), then as the page polls (naming
the cards it shows, static/js/host_cards.js) with nothing changed, and with CHANGED hosts
changed before each poll (a new telemetry round on each of their GPUs), as cards and as the
table view's rows. It also times one host page (telemetry plots and the what-fits table).

    python bench/bench_dashboard.py                 # embedded default: SQLite in a throwaway folder
    DATABASE_URL=postgres://... python bench/bench_dashboard.py   # cleans up its hosts afterwards
    N=100 HOSTS=100 GPUS=8 HOURS=24 CHANGED=5 python bench/bench_dashboard.py
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

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
RAW_STEP_S = 10


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def main() -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.urls import reverse
    from django.utils import timezone

    from deployments.models import Deployment, DeploymentRevision, ModelVariant, Operation
    from deployments.services.catalog import catalog_load
    from hardware.models import GPU, GpuSample, Host, HostSample

    call_command("migrate", verbosity=0)
    catalog_load()
    tag = uuid.uuid4().hex[:6]
    now = timezone.now()
    variant = ModelVariant.objects.get(name="Qwen3.6-35B-A3B-AWQ-4bit")
    started = time.perf_counter()

    hosts = Host.objects.bulk_create(
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
    revisions = DeploymentRevision.objects.bulk_create(
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
    gpus = GPU.objects.bulk_create(
        [
            GPU(host=h, index=g, name="NVIDIA GeForce RTX 3090", memory_bytes=24 * 1024**3, compute_capability="8.6")
            for h in hosts
            for g in range(GPUS)
        ]
    )
    gpus = list(GPU.objects.filter(host__in=hosts))
    print(f"{len(hosts)} hosts, {len(gpus)} GPUs, {len(revisions)} revisions in {time.perf_counter() - started:.1f}s")

    started = time.perf_counter()
    rows = 0
    batch: list[GpuSample] = []

    def flush() -> None:
        nonlocal rows, batch
        GpuSample.objects.bulk_create(batch, batch_size=5000)
        rows += len(batch)
        batch = []

    raw_since = now - timedelta(hours=1)
    for gpu in gpus:
        t = now - timedelta(hours=HOURS)
        while t < raw_since:  # rollups: one per minute
            batch.append(
                GpuSample(
                    gpu=gpu, ts=t, resolution_s=60, util_pct=55, mem_used_bytes=18 * 1024**3, power_w=250, temp_c=61
                )
            )
            t += timedelta(seconds=60)
        k = 0
        while t <= now:  # the last hour raw, every 10 s
            batch.append(
                GpuSample(
                    gpu=gpu, ts=t, util_pct=40 + k % 50, mem_used_bytes=20 * 1024**3, power_w=200 + k % 80, temp_c=60
                )
            )
            t += timedelta(seconds=RAW_STEP_S)
            k += 1
        if len(batch) >= 50_000:
            flush()
    flush()
    print(f"{rows:,} telemetry samples ({HOURS} h: rollups, last hour raw) in {time.perf_counter() - started:.1f}s")

    started = time.perf_counter()
    usage: list[HostSample] = []
    for host in hosts:  # each host's CPU and memory, kept the same way
        t, k = now - timedelta(hours=HOURS), 0
        while t <= now:
            raw = t >= raw_since
            usage.append(
                HostSample(
                    host=host,
                    ts=t,
                    resolution_s=0 if raw else 60,
                    cpu_pct=20 + k % 60,
                    load_1=1.5,
                    load_5=1.2,
                    load_15=1.0,
                    mem_total_bytes=256 * 1024**3,
                    mem_available_bytes=(100 + k % 50) * 1024**3,
                    swap_total_bytes=0,
                    swap_used_bytes=0,
                )
            )
            t += timedelta(seconds=RAW_STEP_S if raw else 60)
            k += 1
    HostSample.objects.bulk_create(usage, batch_size=5000)
    print(f"{len(usage):,} CPU and memory samples in {time.perf_counter() - started:.1f}s")

    user = get_user_model().objects.create_superuser(f"bench-{tag}", password=uuid.uuid4().hex)
    client = Client()
    client.force_login(user)

    sql_ms: list[float] = []

    def measure(url: str, n: int, **headers: str) -> tuple[list[float], list[int]]:
        times, queries = [], []
        sql_ms.clear()
        client.get(url, **headers)  # warm up (template loading, first connection)
        for _ in range(n):
            with CaptureQueriesContext(connection) as ctx:
                t0 = time.perf_counter()
                response = client.get(url, **headers)
                times.append((time.perf_counter() - t0) * 1000.0)
            assert response.status_code == 200, response.status_code
            queries.append(len(ctx.captured_queries))
            sql_ms.append(sum(float(q["time"]) for q in ctx.captured_queries) * 1000.0)
        return times, queries

    cards_url = reverse("dashboard:cards")
    online = [h.pk for i, h in enumerate(hosts) if i % 10]  # every tenth host's agent is away
    Host.objects.filter(pk__in=online).update(last_heartbeat=timezone.now())
    times, queries = measure(cards_url, N, HTTP_HX_REQUEST="true")
    full = client.get(cards_url, HTTP_HX_REQUEST="true").content.decode()
    print(
        f"dashboard partial, every card ({len(hosts)} hosts x {GPUS} GPUs, {len(full) / 1024:.0f} KiB): "
        f"median {statistics.median(times):.1f} ms, p95 {_percentile(times, 0.95):.1f} ms, "
        f"queries/request {sorted(set(queries))} (SQL median {statistics.median(sql_ms):.1f} ms) over {N} requests"
    )
    listed = re.search(r'data-hosts="([^"]+)"', full)
    if listed is None:
        return  # a panel whose page does not name its cards: nothing more to measure
    shown = dict(re.findall(r'data-host="([^"]+)" data-v="([^"]+)"', full))
    by_host_gpus: dict[int, list[GPU]] = {}
    for g in gpus:  # this run's hosts' GPUs only (read by host above)
        by_host_gpus.setdefault(g.host_id, []).append(g)

    def polls(n: int, changed: int, view: str = "cards") -> None:
        times, sizes, queries, sent = [], [], [], []
        sql_ms.clear()
        for i in range(n):
            Host.objects.filter(pk__in=online).update(last_heartbeat=timezone.now())  # their agents' heartbeats
            for h in hosts[(i * changed) % len(hosts) :][:changed]:  # a new telemetry round on their GPUs
                GpuSample.objects.bulk_create(
                    [
                        GpuSample(gpu=g, ts=timezone.now(), util_pct=i % 100, mem_used_bytes=20 * 1024**3, power_w=300)
                        for g in by_host_gpus[h.pk]
                    ]
                )
            table = "view=table&" if view == "table" else ""
            url = f"{cards_url}?{table}hosts={listed.group(1)}&have={'.'.join(shown.values())}"
            with CaptureQueriesContext(connection) as ctx:
                t0 = time.perf_counter()
                response = client.get(url, HTTP_HX_REQUEST="true")
                times.append((time.perf_counter() - t0) * 1000.0)
            assert response.status_code == 200, response.status_code
            body = response.content.decode()
            got = dict(re.findall(r'data-host="([^"]+)" data-v="([^"]+)"', body))
            # The changed hosts' cards, and an offline host's whenever its "last heartbeat ... ago" moved.
            assert changed <= len(got) <= changed + len(hosts) - len(online), f"{len(got)} sent, {changed} changed"
            shown.update(got)
            sent.append(len(got))
            sizes.append(len(response.content))
            queries.append(len(ctx.captured_queries))
            sql_ms.append(sum(float(q["time"]) for q in ctx.captured_queries) * 1000.0)
        print(
            f"dashboard poll ({view}), {changed} of {len(hosts)} hosts changed: {max(sizes) / 1024:.1f} KiB at most "
            f"({max(sent)} {'rows' if view == 'table' else 'cards'}), "
            f"median {statistics.median(times):.1f} ms, p95 {_percentile(times, 0.95):.1f} ms, "
            f"queries/request {sorted(set(queries))} (SQL median {statistics.median(sql_ms):.1f} ms) over {n} polls"
        )

    polls(N, 0)
    polls(N, CHANGED)
    polls(N, CHANGED, view="table")  # the same fingerprints: the page's rows are its cards' hosts
    host_url = reverse("hardware:host_detail", args=[hosts[1].name])
    n_host = max(5, N // 5)
    times, queries = measure(host_url, n_host)
    print(
        f"host page ({GPUS} GPUs, {360 + 1} samples per GPU in the last hour, what fits): "
        f"median {statistics.median(times):.1f} ms, p95 {_percentile(times, 0.95):.1f} ms, "
        f"queries/request {sorted(set(queries))} (SQL median {statistics.median(sql_ms):.1f} ms) over {n_host} requests"
    )

    if "DATABASE_URL" in os.environ:  # a real database: leave nothing behind
        Host.objects.filter(name__startswith=f"bench-{tag}-").delete()
        user.delete()


if __name__ == "__main__":
    main()

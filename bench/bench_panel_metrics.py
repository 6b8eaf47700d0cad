"""What does a scrape of the panel's /metrics cost, with each GPU's telemetry on it?

bench_dashboard's fleet (HOSTS hosts x GPUS GPUs, HOURS of telemetry: raw 10 s samples for the last
hour, one-minute rollups before), then N GETs of /metrics through Django's test Client from
loopback: p50/p95 server milliseconds, bytes and queries per scrape.

    python bench/bench_panel_metrics.py                      # embedded default: SQLite in a throwaway folder
    DATABASE_URL=postgres://... python bench/bench_panel_metrics.py   # cleans up its hosts afterwards
    N=50 HOSTS=100 GPUS=8 HOURS=2 python bench/bench_panel_metrics.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HOURS", "2")

from bench import bench_dashboard  # noqa: E402 - sets the environment Django reads


def main() -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from deployments.services.catalog import catalog_load
    from hardware.models import Host

    call_command("migrate", verbosity=0)
    catalog_load()
    tag = uuid.uuid4().hex[:6]
    try:
        bench_dashboard.build_fleet(tag, timezone.now())
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")
        client, took = Client(), []
        client.get("/metrics", REMOTE_ADDR="127.0.0.1")
        for _ in range(bench_dashboard.N):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                answer = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
                took.append((time.perf_counter() - started) * 1000)
        took.sort()
        gpus = answer.content.count(b"controlpanel_gpu_memory_total_bytes{")
        print(
            f"panel /metrics, {bench_dashboard.HOSTS} hosts x {bench_dashboard.GPUS} GPUs ({gpus} GPU series), "
            f"{connection.vendor}: p50 {statistics.median(took):.1f} ms, p95 {took[int(len(took) * 0.95) - 1]:.1f} ms, "
            f"{len(answer.content)} bytes, {len(queries.captured_queries)} queries"
        )
    finally:
        if "DATABASE_URL" in os.environ:
            Host.objects.filter(name__startswith=f"bench-{tag}-").delete()


if __name__ == "__main__":
    main()

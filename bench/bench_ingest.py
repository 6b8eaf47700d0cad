"""GPU telemetry ingest through the real path: the agent's HttpPanel -> the panel's agent API
(`POST /agent/v1/telemetry` on gunicorn with one worker, as tests/support/panel.py starts it)
-> telemetry_record -> the database.

HOSTS hosts with GPUS GPUs each, each with its own host token. The samples are the H200's
recorded NVML rounds (tests/fixtures/gpu/h200/nvml_live.json, session "benchmark": what
`read_samples(...).to_dict()` gave next to a serving engine), copied to every GPU index with
fresh timestamps. CLIENTS client processes (this script with --client) each drive a share of
the hosts through one real `HttpPanel` per host, back to back, for SECONDS.

Two shapes, one after the other:
- live: one round per report (GPUS samples), what the agent's telemetry loop sends every
  CONTROLPANEL_TELEMETRY_INTERVAL_S;
- backlog: ROUNDS rounds per report, what the outbox sends once the panel is back.

Prints, per shape: samples stored (counted in the database), wall samples/s, the web server's
CPU seconds (gunicorn master + worker, from /proc), the database server's CPU seconds (on
PostgreSQL: its backends for this database, read from /proc before they close) and samples
per CPU-second of the web server, which is the "samples/s per core" figure, and of web and
database together.

    python bench/bench_ingest.py                 # embedded default: SQLite in a throwaway folder
    DATABASE_URL=postgres://... python bench/bench_ingest.py   # removes its hosts afterwards
    HOSTS=100 GPUS=8 SECONDS=8 CLIENTS=2 ROUNDS=30 python bench/bench_ingest.py
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "tests" / "fixtures" / "gpu" / "h200" / "nvml_live.json"

HOSTS = int(os.environ.get("HOSTS", "100"))
GPUS = int(os.environ.get("GPUS", "8"))
SECONDS = float(os.environ.get("SECONDS", "8"))
CLIENTS = int(os.environ.get("CLIENTS", "2"))
ROUNDS = int(os.environ.get("ROUNDS", "30"))
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one live process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def recorded_rounds() -> list[dict[str, Any]]:
    """The recorded NVML samples of one GPU, one dict per round (GpuSample.to_dict())."""
    rounds = json.loads(FIXTURE.read_text())["sessions"]["benchmark"]["result"]
    return [r["gpus"][0] for r in rounds]


# ---- the client: one process driving a share of the hosts through HttpPanel -----------------
def client_main(url: str, tokens: list[str], rounds_per_report: int, seconds: float) -> None:
    from hostagent.panel import HttpPanel
    from serving.agent_reports import Telemetry

    recorded = recorded_rounds()
    outbox = Path(tempfile.mkdtemp(prefix="bench-ingest-outbox-"))
    panels = [HttpPanel(url, token, outbox_dir=outbox / str(i)) for i, token in enumerate(tokens)]
    reports = samples = 0
    cpu0, t0, k = time.process_time(), time.monotonic(), 0
    deadline = t0 + seconds
    while time.monotonic() < deadline:
        for panel in panels:
            now = time.time()
            batch = []
            for r in range(rounds_per_report):
                sample = recorded[(k + r) % len(recorded)]
                ts = now - (rounds_per_report - r) * 10.0
                batch.extend({**sample, "index": g, "timestamp": ts} for g in range(GPUS))
            panel.telemetry(Telemetry(gpu_samples=batch))
            reports += 1
            samples += len(batch)
            k += 1
            if time.monotonic() >= deadline:
                break
    kept = sum(len(p.outbox) for p in panels)
    window = time.monotonic() - t0
    print(
        json.dumps(
            {"reports": reports, "samples": samples, "cpu_s": time.process_time() - cpu0, "kept": kept, "s": window}
        )
    )


# ---- the panel side ------------------------------------------------------------------------
def main() -> None:
    if "DATABASE_URL" not in os.environ:
        os.environ["CONTROLPANEL_DATA_DIR"] = tempfile.mkdtemp(prefix="bench-ingest-")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
    os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from hardware.credentials import host_token_issue
    from hardware.models import GPU, GpuSample, Host
    from tests.support.llama import free_port
    from tests.support.panel import PanelServer

    call_command("migrate", verbosity=0)
    tag = uuid.uuid4().hex[:6]
    tokens = []
    for i in range(HOSTS):
        host, token = host_token_issue(name=f"ingest-{tag}-{i:03d}", actor=None)
        GPU.objects.bulk_create(
            [GPU(host=host, index=g, name="NVIDIA H200", memory_bytes=150754820096) for g in range(GPUS)]
        )
        tokens.append(token)
    gpus = GPU.objects.filter(host__name__startswith=f"ingest-{tag}-")
    print(f"{HOSTS} hosts x {GPUS} GPUs, {CLIENTS} client processes, {SECONDS:g} s per shape, {connection.vendor}")

    web = PanelServer(free_port(), Path(tempfile.mkdtemp(prefix="bench-ingest-web-")) / "web.log").start()
    try:
        master = web.proc.pid if web.proc else 0
        worker = int(Path(f"/proc/{master}/task/{master}/children").read_text().split()[0])
        for shape, per_report in (("live", 1), ("backlog", ROUNDS)):
            before = GpuSample.objects.filter(gpu__in=gpus).count()
            db0 = _db_cpu(connection)
            web0 = cpu_seconds(master) + cpu_seconds(worker)
            clients = [
                subprocess.Popen(
                    [sys.executable, __file__, "--client", web.url, str(per_report), str(SECONDS)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    cwd=ROOT,
                )
                for _ in range(CLIENTS)
            ]
            outputs = [
                json.loads(c.communicate("\n".join(tokens[i::CLIENTS]))[0].strip().splitlines()[-1])
                for i, c in enumerate(clients)
            ]
            wall = max(o["s"] for o in outputs)  # each client's first report to its last answer
            web_cpu = cpu_seconds(master) + cpu_seconds(worker) - web0
            db1 = _db_cpu(connection)
            db_cpu = db1 - db0 if db0 is not None and db1 is not None else None
            stored = GpuSample.objects.filter(gpu__in=gpus).count() - before
            sent = sum(o["samples"] for o in outputs)
            reports = sum(o["reports"] for o in outputs)
            kept = sum(o["kept"] for o in outputs)
            client_cpu = sum(o["cpu_s"] for o in outputs)
            assert stored == sent and not kept, f"sent {sent}, stored {stored}, {kept} reports kept in the outbox"
            db_note = f", database {db_cpu:.2f} s" if db_cpu is not None else ""
            both = f", web+database {stored / (web_cpu + db_cpu):,.0f}/CPU-s" if db_cpu else ""
            print(
                f"{shape:>7} ({per_report * GPUS} samples/report): {stored:,} samples in {reports:,} reports, "
                f"{wall:.1f} s wall = {stored / wall:,.0f} samples/s; CPU: web {web_cpu:.2f} s{db_note}, "
                f"clients {client_cpu:.2f} s; samples per web-server CPU-second (samples/s/core): "
                f"{stored / web_cpu:,.0f}{both}",
                flush=True,
            )
    finally:
        web.kill()
        if connection.vendor == "postgresql":
            Host.objects.filter(name__startswith=f"ingest-{tag}-").delete()


def _db_cpu(connection: Any) -> float | None:
    """CPU seconds of the PostgreSQL backends: those open on this database for others than us
    (the web server's connections), plus every backend that ended meanwhile (the postmaster's
    reaped children; with short-lived connections that includes other sessions on this server).
    None when the server is not on this machine."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        pids = [row[0] for row in cursor.fetchall()]
        cursor.execute("SELECT pg_backend_pid()")
        own = cursor.fetchone()[0]
    try:
        fields = Path(f"/proc/{own}/stat").read_text().rsplit(")", 1)[1].split()
        postmaster = Path(f"/proc/{fields[1]}/stat").read_text().rsplit(")", 1)[1].split()
        total = (int(postmaster[13]) + int(postmaster[14])) / TICK
    except (FileNotFoundError, PermissionError, ProcessLookupError):
        return None
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # ended meanwhile: counted as reaped
            total += cpu_seconds(pid)
    return total


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client_main(sys.argv[2], sys.stdin.read().split(), int(sys.argv[3]), float(sys.argv[4]))
    else:
        main()

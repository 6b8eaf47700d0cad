"""Chaos: a real stack on this machine (the supervisor of `./scripts/run` with its panel worker and
beat, the host agent, gunicorn and a real llama-server serving the shipped Gemma 3 270M GGUF), asked
for switches and benchmarks while it sends telemetry, and at a random moment during each operation
one process SIGKILLed: the host agent, the panel's worker, a web worker, the engine, Redis or
PostgreSQL (those two started again by this script, as their service manager would; the others by
the supervisor or, for the engine, by the agent's watchdog). Loopback only, bounded in rounds and
minutes.

Setups: `embedded` (SQLite, the embedded Redis on its socket, no environment) and `postgres` (a
private PostgreSQL cluster, tests/support/private_postgres.py, and a private redis-server with an
append-only file as docker-compose runs it, tests/support/private_redis.py, each on its own port
under a temporary folder: the machine's own servers are never touched).

Printed per fault kind: rounds survived (the operation ended, the panel answers, a probe goes
through the broker to the agent and back, the engine serves when it should), operations left
stuck (queued or running after the recovery window), results lost (the agent's task ran to its
end but the panel holds `lost`, or a succeeded benchmark without its results), telemetry lost
(samples missing while the agent lived: the outbox promises to keep them through any outage of the
panel, so none may go missing), and the recovery time (kill to all of the above), median and max.

    python bench/chaos.py --setup embedded --rounds 20
    python bench/chaos.py --setup postgres --rounds 3 --faults agent,postgres --minutes 20
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.embedded import EmbeddedPanel, embedded_env, prepare  # noqa: E402
from tests.support.llama import free_port, gemma_model_path  # noqa: E402

FAULTS = ("agent", "worker", "web", "engine", "engine-away", "redis", "postgres")
AWAY_S = 20.0  # engine-away: how long the web server is stopped (SIGSTOP) around the engine's kill
TELEMETRY_S = 2
DONE = ("succeeded", "failed", "cancelled", "lost")


@dataclass
class Tally:
    """One fault kind: rounds, survived, stuck, lost, telemetry (counts); recovery seconds; the
    broken rounds' lines."""

    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    recovery: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Stack:
    """The panel under test and the servers it depends on in this setup."""

    def __init__(self, setup: str, folder: Path) -> None:
        self.setup = setup
        self.folder = folder
        self.data = folder / "data"
        self.engine_port = free_port()
        self.model = gemma_model_path()
        self.extra = {
            "CONTROLPANEL_MODEL_DIRS": str(Path(self.model).parent),
            "CONTROLPANEL_TELEMETRY_INTERVAL_S": str(TELEMETRY_S),
            "CONTROLPANEL_AGENT_HEARTBEAT_S": "2",
        }
        self.redis: Any = None
        self.postgres: Any = None
        if setup == "postgres":
            from tests.support.private_postgres import PrivatePostgres
            from tests.support.private_redis import PrivateRedis

            self.postgres = PrivatePostgres().init().start()
            self.postgres.create_database()
            (folder / "redis").mkdir()
            self.redis = PrivateRedis(folder / "redis", appendonly=True).start()
            self.extra.update(DATABASE_URL=self.postgres.url, CELERY_BROKER_URL=self.redis.admin_url)
        env = embedded_env(self.data, **self.extra)
        os.environ.update(env)  # this process reads the same database (its ORM, below)
        for name in ("DATABASE_URL", "CELERY_BROKER_URL"):
            if name not in self.extra:
                os.environ.pop(name, None)
        prepare(self.data, env)
        # Every round kills something: the supervisor must not give up on a process restarted often.
        args = ["--max-restarts", "1000"]
        self.panel = EmbeddedPanel(self.data, free_port(), extra_env=self.extra, args=args).start()
        self.panel.wait_healthy(timeout=180)

    # faults ------------------------------------------------------------------------------
    def kill(self, fault: str) -> str:
        """SIGKILL one process of the kind; the restart of Redis and PostgreSQL is ours. Says which."""
        if fault == "redis" and self.redis is not None:  # our private redis-server (its Popen), never 6379
            pid = self.redis.proc.pid
            self.redis.kill()
            time.sleep(1.0)
            self.redis.start()
            return f"redis-server {pid} (restarted)"
        if fault == "postgres":  # our private cluster (its own data folder and port), never 5432
            pid = self.postgres.postmaster_pid()
            self.postgres.kill()
            time.sleep(1.0)
            for _ in range(30):  # its orphaned backends exit within a moment; then it recovers
                try:
                    self.postgres.start()
                    break
                except subprocess.CalledProcessError:
                    time.sleep(0.5)
            return f"postmaster {pid} (restarted)"
        if fault == "engine-away":  # the engine dies while the panel is away: the agent's watchdog acts alone
            web = self.panel.child_pid("web")
            assert web is not None and self.ours(web), f"the web server {web} is not this stack's"
            os.killpg(web, signal.SIGSTOP)  # the web server leads its process group (the supervisor's rule)
            try:
                time.sleep(2.0)
                what = self.kill("engine")
                time.sleep(AWAY_S)
            finally:
                os.killpg(web, signal.SIGCONT)
            return f"{what} while the panel was stopped for {AWAY_S:.0f} s"
        pid = self.pid_of(fault)
        if pid is None:
            return f"no {fault} process"
        if not (self.is_engine(pid) if fault == "engine" else self.ours(pid)):
            return f"no {fault} process of this stack (pid {pid} is not ours: left alone)"
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        return f"{fault} {pid}"

    def ours(self, pid: int) -> bool:
        """`pid` runs below this stack's supervisor: the machine is shared, and a pid read from a
        state file may since belong to another process (another agent's, another panel's)."""
        return any(proc.pid == pid for proc in self.panel.tree())

    def is_engine(self, pid: int) -> bool:
        """`pid` is the llama-server this stack's agent started: the one its record names (same
        start time), serving our model on our port (an engine outlives a killed agent, so it is
        not always below the supervisor)."""
        from hostagent.runtime.processes import is_alive, read_cmdline

        for record in (self.data / "host").glob("*/engine.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                data = json.loads(record.read_text())
                if int(data["pid"]) == pid and is_alive(pid, data.get("start_ticks")):
                    argv = " ".join(read_cmdline(pid))
                    return self.model in argv and str(self.engine_port) in argv
        return False

    def pid_of(self, fault: str) -> int | None:
        if fault in ("agent", "worker", "redis"):
            return self.panel.child_pid(fault)
        if fault == "web":  # one of gunicorn's workers (its master starts another)
            master = self.panel.child_pid("web")
            children = Path(f"/proc/{master}/task/{master}/children").read_text().split() if master else []
            return int(random.choice(children)) if children else None  # noqa: S311
        if fault == "engine":
            for record in (self.data / "host").glob("*/engine.json"):
                with contextlib.suppress(OSError, ValueError, KeyError):
                    return int(json.loads(record.read_text())["pid"])
        return None

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.panel.stop(signal.SIGTERM, timeout=30)
        if self.panel.proc is not None and self.panel.proc.poll() is None:
            self.panel.kill_all()
        if self.redis is not None:
            self.redis.stop()
        if self.postgres is not None:
            self.postgres.remove()


def orm(call: Any, timeout: float = 60) -> Any:
    """Call the ORM, again on a fresh connection while the database is away (it is killed here)."""
    from django.db import OperationalError, close_old_connections, connections

    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except OperationalError:
            connections.close_all()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
        finally:
            close_old_connections()


class Chaos:
    def __init__(self, stack: Stack, args: argparse.Namespace) -> None:
        import django

        django.setup()
        from deployments.models import ModelVariant
        from deployments.runtime_bridge import spec_for_values
        from deployments.services.benchmarks import profile_from_input
        from deployments.services.revisions import revision_create
        from hardware.models import Host

        self.stack = stack
        self.args = args
        self.host = Host.objects.get()
        model = ModelVariant.objects.create(name="gemma-chaos", format="gguf", gguf_file=stack.model)
        self.revisions = [
            revision_create(host=self.host, spec=spec_for_values(engine="llama.cpp", engine_version="", model=model,
                            served_name="gemma", port=stack.engine_port, env={},
                            knobs={"ctx_size": ctx, "parallel": 1, "n_gpu_layers": 0}),
                            message=f"chaos ctx {ctx}", actor=None)
            for ctx in (1024, 2048)
        ]  # fmt: skip
        self.profile = profile_from_input(name="quick", concurrency=[1], requests=2, input_tokens=16, output_tokens=8)
        self.tally: dict[str, Tally] = collections.defaultdict(Tally)
        self.n = 0

    def request(self, *, benchmark: bool = False) -> Any:
        """The next operation: a switch to the other revision, or a benchmark of what is served."""
        from deployments.models import active_revision_of
        from deployments.services.benchmarks import benchmark_request
        from deployments.services.switch import switch_request

        self.n += 1
        host = self.fresh_host()
        active = active_revision_of(host)
        if active is not None and (benchmark or self.n % 2 == 0):
            return orm(lambda: benchmark_request(host=host, profile=self.profile, actor=None))
        target = self.revisions[0] if active is None or active.pk != self.revisions[0].pk else self.revisions[1]
        return orm(lambda: switch_request(revision=target, actor=None))

    def fresh_host(self) -> Any:
        """The host read now (what it serves is cached on a Host object once read)."""
        from hardware.models import Host

        return orm(lambda: Host.objects.select_related("deployment__active_revision").get(pk=self.host.pk))

    def wait_idle(self, timeout: float) -> bool:
        from deployments.models import Operation

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not orm(lambda: Operation.objects.filter(state__in=("queued", "running")).exists()):
                return True
            time.sleep(0.5)
        return False

    def one_round(self, fault: str) -> None:
        from deployments.models import Operation

        tally = self.tally[fault]
        tally.counts["rounds"] += 1
        self.wait_idle(self.args.recovery)
        if fault.startswith("engine") and self.stack.pid_of("engine") is None:
            self.settle(self.wait_op(self.request(), 240))  # something to kill: serve first
        op = self.request(benchmark=fault == "engine-away")  # the engine must be serving: no switch
        started = time.time()
        time.sleep(random.uniform(0.3, self.args.max_delay))  # noqa: S311 - a random moment
        what = self.stack.kill(fault)
        killed_at = time.monotonic()
        ok, recovered = self.recovered(op, killed_at)
        if fault == "engine-away" and not self.watchdog_reported(started):
            ok = False
            tally.notes.append("the watchdog's restart never reached the panel")
        op = orm(lambda: Operation.objects.get(pk=op.pk))
        stuck = self.stuck(op)
        lost = self.result_lost(op)
        telemetry = self.telemetry_lost(started, fault)
        tally.counts["stuck"] += stuck
        tally.counts["lost"] += lost
        tally.counts["telemetry"] += telemetry
        survived = ok and not stuck and not lost and telemetry == 0
        tally.counts["survived"] += survived
        if recovered is not None:
            tally.recovery.append(recovered)
        line = (
            f"{fault:>8} round {tally.counts['rounds']}: {'survived' if survived else 'BROKEN'}; killed {what}; "
            f"{op.kind} {op.state} {op.error[:120]!r}; recovery {recovered if recovered is not None else '-'} s"
            + (f"; telemetry lost {telemetry}" if telemetry else "")
        )
        if not survived:
            tally.notes.append(line)
        print(line, flush=True)

    def recovered(self, op: Any, killed_at: float) -> tuple[bool, float | None]:
        """Wait for the operation to end, the panel to answer, a probe to succeed and the engine to
        serve (when the host should serve); the seconds since the kill, or None past the window."""
        deadline = killed_at + self.args.recovery
        op = self.wait_op(op, max(1.0, deadline - time.monotonic()))
        if op.state not in DONE:
            return False, None
        while time.monotonic() < deadline:
            if self.healthy() and self.serving() and self.probe(deadline):
                return True, round(time.monotonic() - killed_at, 1)
            time.sleep(3.0)
        return False, None

    def stuck(self, op: Any) -> bool:
        """Queued after the window, or running with nobody touching it (its worker heartbeats
        every 10 s while it works: a slow engine on a loaded machine is not stuck)."""
        from deployments.models import Operation

        give_up = time.monotonic() + 600
        while op.state == "running" and time.monotonic() < give_up:
            if (timezone_now() - op.heartbeat_at).total_seconds() > 30:
                return True
            time.sleep(2.0)
            op = orm(lambda pk=op.pk: Operation.objects.get(pk=pk))
        return bool(op.state in ("queued", "running"))

    def wait_op(self, op: Any, timeout: float) -> Any:
        from deployments.models import Operation

        deadline = time.monotonic() + timeout
        while op.state not in DONE and time.monotonic() < deadline:
            time.sleep(0.3)
            op = orm(lambda pk=op.pk: Operation.objects.get(pk=pk))
        return op

    def settle(self, op: Any) -> None:
        if op.state != "succeeded":
            print(f"  (setting up: {op.kind} {op.state} {op.error[:200]})", flush=True)

    def healthy(self) -> bool:
        import httpx

        try:
            return httpx.get(f"{self.stack.panel.url}/healthz", timeout=3).status_code == 200
        except httpx.HTTPError:
            return False

    def probe(self, deadline: float) -> bool:
        from deployments.services.operations import HostBusyError
        from deployments.services.switch import probe_request

        try:
            op = orm(lambda: probe_request(host=self.host, actor=None))
        except HostBusyError:
            return False
        return bool(self.wait_op(op, max(1.0, min(30.0, deadline - time.monotonic()))).state == "succeeded")

    def serving(self) -> bool:
        """The engine answers when the panel says the host serves a revision."""
        import httpx

        from deployments.models import active_revision_of

        if active_revision_of(self.fresh_host()) is None:
            return True
        try:
            return httpx.get(f"http://127.0.0.1:{self.stack.engine_port}/health", timeout=3).status_code == 200
        except httpx.HTTPError:
            return False

    def watchdog_reported(self, since: float) -> bool:
        """The agent's watchdog restarted the engine and the panel has its word (kept in the outbox
        while the panel was away)."""
        from hardware.models import HostEvent

        after = _aware(since)
        return bool(orm(lambda: HostEvent.objects.filter(kind="watchdog.restarted", at__gte=after).exists()))

    def result_lost(self, op: Any) -> bool:
        """The agent's task ran to its end (its worker logged it), yet the panel has no word of it."""
        from deployments.models import BenchmarkRun

        finished = f"[{op.pk}] succeeded" in self.stack.panel.log("agent")
        if finished and op.state == "lost":
            return True
        if op.kind == "benchmark" and op.state == "succeeded":
            run = orm(lambda: BenchmarkRun.objects.filter(operation=op).first())
            return run is None or not run.results
        return False

    def telemetry_lost(self, since: float, fault: str) -> int:
        """Samples missing between `since` and now, beyond the agent's own downtime (none are made
        while it is dead): each gap longer than three intervals counts its missing samples (a loaded
        machine delays a reading by a second or two: no loss)."""
        from hardware.models import HostSample

        from_ts = _aware(since - 2 * TELEMETRY_S)
        stamps = orm(
            lambda: list(HostSample.objects.filter(host=self.host, ts__gte=from_ts).values_list("ts", flat=True))
        )
        stamps = sorted(t.timestamp() for t in stamps)
        missing = sum(
            max(0, round((b - a) / TELEMETRY_S) - 1)
            for a, b in zip(stamps, stamps[1:], strict=False)
            if b - a > 3 * TELEMETRY_S
        )
        if fault == "agent":  # the dead agent measured nothing: up to its restart (ready again) is no loss
            missing = max(0, missing - round(25 / TELEMETRY_S))
        return int(missing)

    def report(self) -> None:
        print(f"\n===== chaos: setup {self.stack.setup}, recovery window {self.args.recovery:.0f} s")
        heads = ("survived", "stuck", "lost", "telemetry lost", "recovery median/max s")
        print(f"{'fault':>8} {heads[0]:>10} {heads[1]:>6} {heads[2]:>5} {heads[3]:>15} {heads[4]:>22}")
        for fault, t in self.tally.items():
            rec = f"{statistics.median(t.recovery):.1f} / {max(t.recovery):.1f}" if t.recovery else "-"
            c = t.counts
            counts = f"{c['survived']:>4} of {c['rounds']:<3} {c['stuck']:>6} {c['lost']:>5} {c['telemetry']:>15}"
            print(f"{fault:>8} {counts} {rec:>22}")
        for t in self.tally.values():
            for note in t.notes:
                print(f"  {note}")


def timezone_now() -> Any:
    from django.utils import timezone

    return timezone.now()


def _aware(epoch: float) -> Any:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--setup", choices=("embedded", "postgres"), default="embedded")
    parser.add_argument("--rounds", type=int, default=20, help="per fault kind")
    parser.add_argument("--faults", default=",".join(FAULTS), help="comma-separated: " + ",".join(FAULTS))
    parser.add_argument("--minutes", type=float, default=120, help="stop starting rounds after this long")
    parser.add_argument("--recovery", type=float, default=120, help="seconds a round waits for recovery")
    parser.add_argument("--max-delay", type=float, default=4.0, help="latest moment of the kill after the request")
    args = parser.parse_args()
    faults = [f for f in args.faults.split(",") if f]
    unknown = set(faults) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults: {', '.join(sorted(unknown))}")
    if args.setup == "embedded" and "postgres" in faults:
        faults.remove("postgres")  # SQLite is a file, not a server
        print("embedded setup: no PostgreSQL to kill (SQLite); that fault is skipped")
    stack = Stack(args.setup, Path(tempfile.mkdtemp(prefix=f"chaos-{args.setup}-")))
    end = time.monotonic() + args.minutes * 60
    chaos = None
    try:
        chaos = Chaos(stack, args)
        chaos.settle(chaos.wait_op(chaos.request(), 240))
        for number in range(args.rounds):
            for fault in faults:
                if time.monotonic() > end:
                    break
                chaos.one_round(fault)
            if time.monotonic() > end:
                print(f"time is up after {number + 1} rounds", flush=True)
                break
    finally:
        if chaos is not None:
            chaos.report()
        stack.stop()
    ok = chaos is not None and all(t.counts["survived"] == t.counts["rounds"] for t in chaos.tally.values())
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

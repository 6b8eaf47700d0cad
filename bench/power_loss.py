"""Power loss on the embedded default, with the real processes, N rounds: every process of
`./scripts/run` (the supervisor, its Redis, the panel worker and beat, the agent, the web server)
and a writer committing audit events as fast as it can are SIGKILLed at the same instant, at a
random moment, then the panel is started again on the same data folder. Per round it prints:
SQLite's `PRAGMA integrity_check`, the writes committed before the loss and found after, whether
every state file and outbox entry under the agent's folder parses (a killed writer's temporary
file swept at the start, never read), whether a probe then goes through the broker to the agent
and back, the recovery time (start to healthy), and with `--engine` (Gemma on llama-server served
first) the seconds until the engine serves again, restored by the agent as the host's desired
state. Too slow for the suite (a minute and a half a round on a loaded 2-core machine);
tests/test_atomic_writes.py and tests/test_disk_full.py test each write path fast. A SIGKILL
leaves the page cache to the kernel: core/atomicfile.py's fsyncs carry the same promise through a
real power cut.

    python bench/power_loss.py --rounds 5 [--engine]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.embedded import EmbeddedPanel, embedded_env, prepare  # noqa: E402
from tests.support.llama import free_port, gemma_model_path  # noqa: E402
from tests.test_embedded import PROBE, SWITCH  # noqa: E402

WRITER = """
from core.audit import audit_record
n = 0
while True:
    n += 1
    audit_record(action="power.test", summary=f"write {n}", actor=None)
    print(n, flush=True)
"""


def torn_files(host_dir: Path) -> list[str]:
    """State files and outbox entries that do not parse, and temporary files left after a start."""
    bad = []
    for path in sorted(host_dir.rglob("*.json")):
        try:
            json.loads(path.read_text())
        except ValueError:
            bad.append(str(path.relative_to(host_dir)))
    return bad + [str(p.relative_to(host_dir)) for p in host_dir.rglob("*.tmp")]


def engine_back(port: int, since: float, timeout: float) -> float | None:
    """Seconds from `since` (the restart) until the engine answers /health again (the agent restores
    what the host should serve)."""
    import httpx

    while time.monotonic() - since < timeout:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return round(time.monotonic() - since, 1)
        time.sleep(0.5)
    return None


def engine_pid(data: Path) -> int | None:
    """The pid engine.json records (the agent's record of what it started), if any."""
    for record in (data / "host").glob("*/engine.json"):
        with contextlib.suppress(OSError, ValueError):
            return int(json.loads(record.read_text())["pid"])
    return None


def one_round(panel: EmbeddedPanel, data: Path, engine_port: int | None) -> tuple[dict[str, object], EmbeddedPanel]:
    writer = subprocess.Popen(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", WRITER],
        cwd=ROOT, env=panel.env, stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert writer.stdout is not None
    last = writer.stdout.readline().strip()  # writing (Django takes a while to start)
    deadline = time.monotonic() + random.uniform(0.5, 3.0)  # noqa: S311 - a random moment, not a secret
    while time.monotonic() < deadline:
        last = writer.stdout.readline().strip() or last
    engine_before = engine_pid(data)
    for pid in [p.pid for p in panel.tree()] + [writer.pid]:  # the power goes
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    writer.wait(10)
    assert panel.proc is not None
    panel.proc.wait(10)
    with contextlib.closing(sqlite3.connect(data / "db.sqlite3")) as db:
        check = db.execute("PRAGMA integrity_check").fetchone()[0]
        found = db.execute("SELECT COUNT(*) FROM deployments_auditevent WHERE action='power.test'").fetchone()[0]
        db.execute("DELETE FROM deployments_auditevent WHERE action='power.test'")
        db.commit()
    t0 = time.monotonic()
    again = EmbeddedPanel(data, panel.port, extra_env=extra_env(engine_port)).start()
    again.wait_healthy(timeout=120)
    recovery = time.monotonic() - t0
    probe = json.loads(again.django(PROBE).strip().splitlines()[-1])["state"]
    engine = engine_back(engine_port, t0, 240) if engine_port else "n/a"
    row = {"integrity": check, "acknowledged": int(last), "found": found, "torn": torn_files(data / "host"),
           "probe": probe, "recovery_s": round(recovery, 1), "engine_back_s": engine,
           "engine_pids": [engine_before, engine_pid(data)]}  # fmt: skip
    return row, again


def extra_env(engine_port: int | None) -> dict[str, str]:
    """With an engine, the folder of the Gemma file is a model folder of this host."""
    return {"CONTROLPANEL_MODEL_DIRS": str(Path(gemma_model_path()).parent)} if engine_port else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--engine", action="store_true", help="serve Gemma on llama-server first; it must come back")
    args = parser.parse_args()
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "CONTROLPANEL_HOST_STATE_DIR"):
        os.environ.pop(name, None)
    data = Path(tempfile.mkdtemp(prefix="power-loss-")) / "data"
    engine_port = free_port() if args.engine else None
    prepare(data, embedded_env(data, **extra_env(engine_port)))
    panel = EmbeddedPanel(data, free_port(), extra_env=extra_env(engine_port)).start()
    sound = 0
    try:
        panel.wait_healthy(timeout=120)
        if engine_port:
            out = panel.django(SWITCH.format(model=gemma_model_path(), port=engine_port))
            switched = json.loads(out.strip().splitlines()[-1])
            assert switched["state"] == "succeeded", switched
        for number in range(1, args.rounds + 1):
            row, panel = one_round(panel, data, engine_port)
            ok = row["integrity"] == "ok" and not row["torn"] and row["probe"] == "succeeded"
            ok = ok and row["engine_back_s"] is not None
            ok = ok and int(row["found"]) >= int(row["acknowledged"])  # type: ignore[call-overload]
            sound += ok
            print(f"round {number}: {'sound' if ok else 'BROKEN'} {json.dumps(row)}", flush=True)
        panel.stop(signal.SIGTERM)
    finally:
        if panel.proc is not None and panel.proc.poll() is None:
            panel.kill_all()
    print(f"{sound} of {args.rounds} rounds started again sound")
    sys.exit(0 if sound == args.rounds else 1)


if __name__ == "__main__":
    main()

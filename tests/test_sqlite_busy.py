"""The embedded default's SQLite never answers "database is locked" for being busy (issue 26): a
read-then-write transaction that meets another writer waits its turn. Run in a fresh interpreter
on the embedded default's settings (no DATABASE_URL), two threads, each with its own connection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = r"""
import json, threading, time, django
django.setup()
from django.db import connection, connections, transaction

with connection.cursor() as c:
    c.execute("CREATE TABLE t (n integer)")
    mode = c.execute("PRAGMA journal_mode").fetchone()[0]
connections.close_all()
held, errors = threading.Event(), []

def writer():
    try:
        with transaction.atomic(), connection.cursor() as c:
            c.execute("INSERT INTO t VALUES (1)")
            held.set()
            time.sleep(1.0)  # an agent's progress write that takes its time
    except Exception as exc:
        errors.append(f"writer: {exc}")
        held.set()
    finally:
        connections.close_all()

def read_then_write():
    held.wait()
    try:
        with transaction.atomic(), connection.cursor() as c:  # a form save: read, then write
            c.execute("SELECT count(*) FROM t").fetchone()
            c.execute("INSERT INTO t VALUES (2)")
    except Exception as exc:
        errors.append(f"read-then-write: {exc}")
    finally:
        connections.close_all()

threads = [threading.Thread(target=writer), threading.Thread(target=read_then_write)]
[t.start() for t in threads]
[t.join() for t in threads]
with connection.cursor() as c:
    rows = c.execute("SELECT count(*) FROM t").fetchone()[0]
print(json.dumps({"mode": mode, "errors": errors, "rows": rows}))
"""


def test_a_read_then_write_transaction_waits_for_a_writer_instead_of_failing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL"}}
    env.update(CONTROLPANEL_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="controlpanel.settings")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"mode": "wal", "errors": [], "rows": 2}

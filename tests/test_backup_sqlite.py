"""Backup and restore on the embedded default (SQLite in WAL mode, the key in the data folder), as
a user runs them: `manage.py backup` on one data folder, `manage.py restore` into a fresh one on
another "machine" (its own key), and the restored panel shows the same history, decrypts its
secrets and passes SQLite's integrity check. The copy is made with SQLite's online backup API, so
what is still in the -wal file is in it too."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.support.embedded import ROOT, embedded_env, manage

# A panel process that wrote and still holds the database open, its writes not yet checkpointed.
LIVE_WRITER = """
import json, time
from django.core.management import call_command
from django.db import connection
from core.audit import audit_record
from tests.support.history import build_history, fingerprint
call_command("migrate", verbosity=0)
build_history()
connection.cursor().execute("PRAGMA wal_autocheckpoint=0")
audit_record(action="backup.test", summary="written while the backup runs", actor=None)
print("FP=" + json.dumps(fingerprint()), flush=True)
time.sleep(120)
"""
PRINT = "import json; from tests.support.history import fingerprint; print('FP=' + json.dumps(fingerprint()))"


def _fingerprint(env: dict[str, str]) -> dict:
    out = manage(env, "shell", "-c", PRINT)
    return json.loads(out.split("FP=", 1)[1])


def test_the_embedded_default_backs_up_and_restores_onto_another_machine(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    old_env, new_env = embedded_env(old), embedded_env(new)
    writer = subprocess.Popen(
        [sys.executable, "manage.py", "shell", "-v", "0", "-c", LIVE_WRITER],
        cwd=ROOT,
        env=old_env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        before = json.loads(writer.stdout.readline().split("FP=", 1)[1])
        assert (old / "db.sqlite3-wal").stat().st_size > 0  # the last writes live only in the -wal file yet
        assert before["audit"][-1][0] == "backup.test"
        out = manage(old_env, "backup", "--output", str(tmp_path / "backups"))
    finally:
        writer.kill()
        writer.wait(10)
    assert "Backed up sqlite (sqlite-backup-api" in out
    (folder,) = (tmp_path / "backups").iterdir()
    assert json.loads((folder / "manifest.json").read_text())["database"]["file"] == "db.sqlite3"
    assert not (folder / "db.sqlite3-wal").exists()

    new.mkdir(mode=0o700)
    (new / "secret_key").write_text("the-new-machines-own-key")
    out = manage(new_env, "restore", str(folder))
    assert f"The backup's secret key is back in {new / 'secret_key'}" in out
    assert (new / "secret_key").read_text() == (old / "secret_key").read_text()
    after = _fingerprint(new_env)
    assert after["audit"][-1][0] == "backup.restore"  # the restore says so in the history it restored
    assert {**after, "audit": after["audit"][:-1]} == before
    with sqlite3.connect(new / "db.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    # The restored panel now holds history: a second restore is refused, nothing changed.
    again = subprocess.run(
        [sys.executable, "manage.py", "restore", str(folder)], cwd=ROOT, env=new_env, capture_output=True, text=True
    )
    assert again.returncode == 1
    assert "already holds history" in again.stderr and "Add --force to replace it." in again.stderr

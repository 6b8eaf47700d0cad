"""The database half of a backup, one way per kind of database, each a consistent snapshot:

- SQLite: the online backup API of sqlite3 (`Connection.backup`), page by page under SQLite's own
  locking, so a live WAL database is copied whole; never a copy of the file, which can miss what
  is still in the `-wal` file or catch a page mid-write.
- PostgreSQL with `pg_dump` on PATH: `pg_dump --format=custom`, run as an argv list with the
  password in its environment, inside a snapshot the panel exported (`--snapshot`) from a
  REPEATABLE READ transaction, in which the row counts of the manifest are taken too.
- PostgreSQL without `pg_dump` (the Docker image has no client tools): Django's own `dumpdata`
  (every model, base managers) inside the same kind of REPEATABLE READ transaction. It restores
  only into a panel at exactly the same migrations.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.db import connections, transaction

SQLITE, PG_DUMP, DJANGO_DUMP = "sqlite-backup-api", "pg_dump", "django-dumpdata"
FILES = {SQLITE: "db.sqlite3", PG_DUMP: "db.pgdump", DJANGO_DUMP: "db.json"}


class BackupError(Exception):
    """A backup or a restore that cannot go on: one sentence saying why; nothing was changed."""


def method_for(using: str) -> str:
    vendor = connections[using].vendor
    if vendor == "sqlite":
        return SQLITE
    if vendor == "postgresql":
        return PG_DUMP if shutil.which("pg_dump") else DJANGO_DUMP
    return DJANGO_DUMP


def quote(using: str, table: str) -> str:
    return connections[using].ops.quote_name(table)


def table_counts(cursor: Any, using: str, tables: list[str]) -> dict[str, int]:
    counts = {}
    for table in sorted(tables):
        cursor.execute(f"SELECT COUNT(*) FROM {quote(using, table)}")  # noqa: S608 - introspected, quoted
        counts[table] = int(cursor.fetchone()[0])
    return counts


def dump(method: str, target: Path, *, using: str) -> dict[str, int]:
    """Write the database's snapshot to `target`; returns the row count of every table in it."""
    if method == SQLITE:
        return _sqlite_dump(target, using=using)
    with _snapshot(using) as cursor:
        counts = table_counts(cursor, using, connections[using].introspection.table_names(cursor))
        if method == PG_DUMP:
            cursor.execute("SELECT pg_export_snapshot()")
            _pg_run(
                ["pg_dump", "--format=custom", "--no-owner", "--no-acl", f"--snapshot={cursor.fetchone()[0]}"],
                using=using,
                tail=["--file", str(target)],
            )
        else:
            call_command("dumpdata", all=True, format="json", output=str(target), verbosity=0, database=using)
    return counts


@contextlib.contextmanager
def _snapshot(using: str) -> Iterator[Any]:
    """A REPEATABLE READ transaction: every read in it sees the same moment."""
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        if connections[using].vendor == "postgresql":
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield cursor


def _sqlite_dump(target: Path, *, using: str) -> dict[str, int]:
    connection = connections[using]
    connection.ensure_connection()
    copy = sqlite3.connect(target)
    try:
        connection.connection.backup(copy)
        cursor = copy.cursor()
        tables = [r[0] for r in cursor.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        counts = table_counts(cursor, using, [t for t in tables if not t.startswith("sqlite_")])
        copy.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal beside it
    finally:
        copy.close()
    return counts


def sqlite_check(path: Path) -> None:
    """Refuse a copy that SQLite itself finds damaged."""
    with contextlib.closing(sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)) as copy:
        verdict = copy.execute("PRAGMA integrity_check").fetchone()[0]
    if verdict != "ok":
        raise BackupError(f"{path} fails SQLite's integrity check ({verdict}): nothing was restored.")


def drop_all_tables(using: str) -> None:
    """Drop every table of the PostgreSQL target before pg_restore recreates them from the dump."""
    connection = connections[using]
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
        if tables:
            cursor.execute("DROP TABLE IF EXISTS " + ", ".join(quote(using, t) for t in tables) + " CASCADE")


def load(method: str, source: Path, *, using: str) -> None:
    """Replace the (emptied) target database with the snapshot in `source`."""
    if method == SQLITE:
        connection = connections[using]
        connection.close()
        with (
            contextlib.closing(sqlite3.connect(source)) as copy,
            contextlib.closing(sqlite3.connect(connection.settings_dict["NAME"], timeout=20)) as live,
        ):
            copy.backup(live)  # page by page under SQLite's locks, like the backup itself
    elif method == PG_DUMP:
        if not shutil.which("pg_restore"):
            raise BackupError(
                "pg_restore is not installed here: install PostgreSQL's client tools to restore a pg_dump backup."
            )
        _pg_run(
            ["pg_restore", "--no-owner", "--no-acl", "--single-transaction", "--exit-on-error"],
            using=using,
            tail=[str(source)],
            dbname_flag=True,
        )
        connections[using].close()
    else:  # the tables as this code makes them (a no-op where they are), emptied, then the rows
        call_command("migrate", verbosity=0, interactive=False, database=using)
        call_command("flush", verbosity=0, interactive=False, inhibit_post_migrate=True, database=using)
        call_command("loaddata", str(source), verbosity=0, database=using)


def _pg_run(argv: list[str], *, using: str, tail: list[str], dbname_flag: bool = False) -> None:
    """Run a PostgreSQL client tool against `using`: an argv list, the password in PGPASSWORD."""
    params = connections[using].settings_dict
    args = list(argv)
    for flag, key in (("--host", "HOST"), ("--port", "PORT"), ("--username", "USER")):
        if params.get(key):
            args += [flag, str(params[key])]
    args += ["--dbname", params["NAME"]] if dbname_flag else []
    args += tail + ([] if dbname_flag else [params["NAME"]])
    env = {**os.environ, "PGPASSWORD": str(params.get("PASSWORD") or "")}
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)  # noqa: S603 - argv list
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no message"])[0][:300]
        raise BackupError(f"{argv[0]} failed (exit {done.returncode}): {first}")

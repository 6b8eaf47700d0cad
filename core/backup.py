"""Backups of the panel and their restore (docs/production.md, "Backups").

A backup is one folder, `controlpanel-backup-<UTC time>`, built under a temporary name and renamed
when complete (a folder with that name is always whole):

    manifest.json            panel version, database kind and method, migrations applied (and the
                             heads), row counts per table, size and sha256 of every file, created at
    db.sqlite3 | db.pgdump | db.json     the database (core.backup_db says how each is made)
    secret_key               the key the panel signs with and encrypts its secrets under (0600)
    secrets_encryption_key   only where SECRETS_ENCRYPTION_KEY is set apart from it (0600)

A restore reads only the files the manifest lists, each by its bare name inside the backup folder
(never a path that leaves it, never a link), checks every checksum and refuses a file the manifest
does not list; it refuses a backup made at migrations this code does not know, and refuses to
replace a database that holds history unless forced; only then does it change anything. It
restores the database, checks the row counts against the manifest, brings an older backup forward
(`migrate`), and puts the key back where the panel reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

from . import backup_db
from .atomicfile import fsync_dir, fsync_file, write_atomic
from .backup_db import BackupError

FORMAT = 1
MANIFEST = "manifest.json"
KEY_FILES = {"secret_key": "SECRET_KEY", "secrets_encryption_key": "SECRETS_ENCRYPTION_KEY"}
# What "a database that holds history" means: any of these has a row.
HISTORY = ("auth.User", "hardware.Host", "deployments.DeploymentRevision", "deployments.Operation", "core.AuditEvent")

__all__ = ["BackupError", "backup_create", "backup_restore", "manifest_read"]


def panel_version() -> str:
    try:
        return metadata.version("llm-controlpanel")
    except metadata.PackageNotFoundError:
        return "unknown"


def _sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _applied(using: str) -> list[tuple[str, str]]:
    return sorted(MigrationRecorder(connections[using]).applied_migrations())


def _heads(applied: list[tuple[str, str]], loader: MigrationLoader) -> dict[str, str]:
    """Per app, the last of its applied migrations (by the code's graph)."""
    done = set(applied)
    heads: dict[str, str] = {}
    for node in applied:
        known = node in loader.graph.nodes
        children = loader.graph.node_map[node].children if known else set()
        if not any(c[0] == node[0] and c in done for c in children):
            heads[node[0]] = node[1]
    return dict(sorted(heads.items()))


def backup_create(*, output: Path, using: str = "default") -> tuple[Path, dict[str, Any]]:
    """Write a backup folder under `output`; returns its path and its manifest."""
    output.mkdir(mode=0o700, parents=True, exist_ok=True)
    started = time.monotonic()
    created = datetime.now(UTC)
    staging = output / f".controlpanel-backup-{created:%Y%m%dT%H%M%S}-{os.getpid()}.tmp"
    final = output / f"controlpanel-backup-{created:%Y%m%dT%H%M%SZ}"
    if final.exists():
        raise BackupError(f"{final} already exists: wait a second, or choose another --output folder.")
    staging.mkdir(mode=0o700)
    try:
        method = backup_db.method_for(using)
        db_file = staging / backup_db.FILES[method]
        counts = backup_db.dump(method, db_file, using=using)
        os.chmod(db_file, 0o600)
        for name, setting in KEY_FILES.items():
            value = getattr(settings, setting, "") or ""
            if value and (name == "secret_key" or value != settings.SECRET_KEY):
                write_atomic(staging / name, value + "\n", mode=0o600)
        applied = _applied(using)
        manifest = {
            "format": FORMAT,
            "panel_version": panel_version(),
            "created_at": created.isoformat(timespec="seconds"),
            "database": {"vendor": connections[using].vendor, "method": method, "file": db_file.name},
            "migration_heads": _heads(applied, MigrationLoader(None, ignore_no_migrations=True)),
            "migrations": [f"{app}.{name}" for app, name in applied],
            "row_counts": counts,
            "files": {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in sorted(staging.iterdir())},
        }
        fsync_file(db_file)  # written by sqlite3, pg_dump or dumpdata: on the disk before the folder is named
        write_atomic(staging / MANIFEST, json.dumps(manifest, indent=2) + "\n", mode=0o600)
        fsync_dir(staging)
        staging.rename(final)
        fsync_dir(output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    manifest["seconds"] = round(time.monotonic() - started, 2)
    return final, manifest


def _file_name(name: Any) -> str:
    """A name the manifest gives for one of its files: a bare file name inside the backup folder
    (no separator, no `..`, not absolute), or BackupError."""
    if (
        not isinstance(name, str)
        or not name
        or "/" in name
        or "\\" in name
        or "\0" in name
        or ".." in name
        or os.path.isabs(name)
        or name in (".", MANIFEST)
    ):
        raise BackupError(
            f"The manifest names {str(name)[:200]!r}, which is not a file name inside the backup folder "
            "(a path with a separator, `..` or an absolute path is never read): nothing was restored."
        )
    return name


def _listed_files(source: Path, manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The manifest's files, each a bare name with its size and sha256, every one present as a
    plain file (not a link) that matches them, and nothing else in the folder."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise BackupError(f"{source / MANIFEST} lists no files with their checksums: nothing was restored.")
    for name, facts in files.items():
        _file_name(name)
        if (
            not isinstance(facts, dict)
            or not isinstance(facts.get("bytes"), int)
            or not isinstance(facts.get("sha256"), str)
        ):
            raise BackupError(f"The manifest lists {name} without its size and sha256: nothing was restored.")
        file = source / name
        if file.is_symlink() or (file.exists() and not file.is_file()):
            raise BackupError(f"{file} is not a plain file (a link is never followed): nothing was restored.")
        if not file.is_file():
            raise BackupError(f"{file} is missing from the backup: nothing was restored.")
        if file.stat().st_size != facts["bytes"] or _sha256(file) != facts["sha256"]:
            raise BackupError(
                f"{file} does not match its checksum in the manifest (damaged or changed since): nothing was restored."
            )
    # Nothing beside them: an unlisted file is read by nobody's choice (SQLite rolls a hot
    # `db.sqlite3-journal` into the database it opens; a key file would be taken as the key).
    extra = sorted(p.name for p in source.iterdir() if p.name != MANIFEST and p.name not in files)
    if extra:
        raise BackupError(
            f"{source / extra[0]} is in the backup folder but not in its manifest (added or left since the backup): "
            "remove it or restore from an untouched copy. Nothing was restored."
        )
    return files


def manifest_read(source: Path) -> dict[str, Any]:
    """The manifest, with every file it lists present by its bare name in `source` and matching
    its checksum, the database file among them, and no file that it does not list."""
    path = source / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise BackupError(f"{source} is not a backup of the panel: it has no {MANIFEST}.") from None
    except (OSError, ValueError) as exc:
        raise BackupError(f"{path} cannot be read as a manifest ({exc}): nothing was restored.") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{path} is not a manifest of backup format {FORMAT}: nothing was restored.")
    files = _listed_files(source, manifest)
    database = manifest.get("database")
    if not isinstance(database, dict) or database.get("method") not in backup_db.FILES:
        raise BackupError(f"{path} names no database of a kind this panel restores: nothing was restored.")
    if _file_name(database.get("file")) not in files:
        raise BackupError(
            f"The manifest's database file {database['file']} is not among the files it lists with a checksum: "
            "nothing was restored."
        )
    return manifest


def _history_rows(using: str) -> dict[str, int]:
    connection = connections[using]
    with connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))
        counts = {}
        for label in HISTORY:
            model = apps.get_model(label)
            if model._meta.db_table in tables:
                counts[model._meta.verbose_name_plural] = model._base_manager.using(using).count()
    return {name: n for name, n in counts.items() if n}


def _check_migrations(manifest: dict[str, Any]) -> bool:
    """Refuse a backup with migrations this code does not have; True when it is older than the code."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    known = {f"{app}.{name}" for app, name in loader.graph.nodes}
    unknown = [m for m in manifest["migrations"] if m not in known]
    if unknown:
        raise BackupError(
            f"This backup was made by a panel ahead of this one (version {manifest['panel_version']}, migrations "
            f"{', '.join(unknown[:3])}{' ...' if len(unknown) > 3 else ''} unknown here): restore it with that "
            "version or a newer one. Nothing was restored."
        )
    leaves = {f"{app}.{name}" for app, name in loader.graph.leaf_nodes()}
    older = not leaves <= set(manifest["migrations"])
    if older and manifest["database"]["method"] == backup_db.DJANGO_DUMP:
        raise BackupError(
            f"This Django-level dump was made at older migrations ({manifest['migration_heads']}); it restores only "
            f"into the panel version that made it ({manifest['panel_version']}), which then upgrades it. "
            "Nothing was restored."
        )
    return older


def _key_plan(source: Path, force: bool) -> Path | None:
    """Where the backup's key goes (the embedded key file), or None when the environment sets the
    key: then it must already be the backup's, else the restored secrets could not be read."""
    apart = source / "secrets_encryption_key"
    if apart.is_file() and apart.read_text().strip() != getattr(settings, "SECRETS_ENCRYPTION_KEY", "") and not force:
        raise BackupError(
            f"SECRETS_ENCRYPTION_KEY differs from the backup's: set it to the key in {apart} first (the restored "
            "secrets are encrypted under it), or add --force. Nothing was restored."
        )
    backed_up = (source / "secret_key").read_text().strip() if (source / "secret_key").is_file() else ""
    key_file = Path(settings.SECRET_KEY_FILE)
    embedded = key_file.is_file() and key_file.read_text().strip() == settings.SECRET_KEY
    if not backed_up or embedded or backed_up == settings.SECRET_KEY:
        return key_file if backed_up and embedded else None
    if not force:
        raise BackupError(
            f"DJANGO_SECRET_KEY differs from the backup's key: set it to the key in {source / 'secret_key'} first "
            "(the restored secrets and sessions are encrypted and signed with it), or add --force. "
            "Nothing was restored."
        )
    return None


def backup_restore(*, source: Path, force: bool = False, using: str = "default") -> dict[str, Any]:
    """Restore the backup folder `source` into `using`; returns the manifest plus what was done."""
    started = time.monotonic()
    manifest = manifest_read(source)
    database = manifest["database"]
    vendor = connections[using].vendor
    if database["vendor"] != vendor:
        raise BackupError(
            f"This backup is of a {database['vendor']} database and this panel runs on {vendor}: "
            "restore it into a panel on the same kind of database. Nothing was restored."
        )
    older = _check_migrations(manifest)
    held = _history_rows(using)
    if held and not force:
        what = ", ".join(f"{n} {name}" for name, n in held.items())
        raise BackupError(
            f"The target database already holds history ({what}): a restore replaces all of it. "
            "Add --force to replace it. Nothing was restored."
        )
    key_file = _key_plan(source, force)
    db_file = source / database["file"]
    if database["method"] == backup_db.SQLITE:
        backup_db.sqlite_check(db_file)
    elif database["method"] == backup_db.PG_DUMP:
        backup_db.drop_all_tables(using)  # the dump recreates every table
    backup_db.load(database["method"], db_file, using=using)
    counted = _counts_after(using, manifest)
    if older:
        call_command("migrate", verbosity=0, interactive=False, database=using)
    if key_file is not None:
        write_atomic(key_file, (source / "secret_key").read_text().strip(), mode=0o600)
    return {
        **manifest,
        "restored_rows": sum(counted.values()),
        "restored_tables": len(counted),
        "migrated_forward": older,
        "key_written": str(key_file) if key_file else "",
        "seconds": round(time.monotonic() - started, 2),
    }


def _counts_after(using: str, manifest: dict[str, Any]) -> dict[str, int]:
    """Every table's rows as the manifest counted them (a Django-level dump leaves django_migrations
    to `migrate`); a difference is an error that names the table."""
    expected = dict(manifest["row_counts"])
    if manifest["database"]["method"] == backup_db.DJANGO_DUMP:
        expected.pop(MigrationRecorder.Migration._meta.db_table, None)
    with connections[using].cursor() as cursor:
        present = set(connections[using].introspection.table_names(cursor))
        missing = sorted(set(expected) - present)
        if missing:
            raise BackupError(f"The restore left out tables {', '.join(missing[:5])}: restore again, or report it.")
        counted = backup_db.table_counts(cursor, using, list(expected))
    wrong = {t: (counted[t], n) for t, n in expected.items() if counted[t] != n}
    if wrong:
        table, (got, want) = next(iter(sorted(wrong.items())))
        raise BackupError(f"After the restore {table} has {got} rows, the backup {want}: restore again, or report it.")
    return counted

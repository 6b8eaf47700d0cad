"""Errors shared by every app."""

from __future__ import annotations

import shutil
from pathlib import Path

from core.atomicfile import is_disk_full_os_error

NO_ROOM_BYTES = 64 * 1024  # less than this free counts as a full disk (SQLite's files grow by pages)


class ImmutableError(RuntimeError):
    """Raised when code tries to change a row that is history."""


DISK_FULL_SENTENCE = (
    "The panel's disk is full: this change was not saved. Free space on the disk holding the panel's data "
    "(or the database's), then try again."
)


def disk_full_command_message(command: str, exc: BaseException) -> str:
    """What `manage.py <command>` says when its write met a full disk, instead of a traceback: a
    database write rolled back and a file is written whole or not at all (core.atomicfile)."""
    return (
        f"manage.py {command}: the disk is full ({exc}). What it was writing was not saved. "
        "Free space on the disk holding the panel's data (or the database's), then run it again."
    )


def is_disk_full(exc: BaseException, *, folder: str | Path | None = None) -> bool:
    """Whether `exc` (or what caused it) says the disk or a quota is full: an OSError with ENOSPC or
    EDQUOT, SQLite's "database or disk is full", PostgreSQL's disk_full (SQLSTATE 53100). With
    `folder` (SQLite's): also SQLite's "disk I/O error" while that folder's disk has no room left,
    which is what opening a database says when its -wal or -shm file cannot be made."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if is_disk_full_os_error(seen):
            return True
        if getattr(seen, "sqlstate", None) == "53100" or "database or disk is full" in str(seen):
            return True
        if folder is not None and str(seen) == "disk I/O error" and _no_room(folder):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _no_room(folder: str | Path) -> bool:
    try:
        return shutil.disk_usage(folder).free < NO_ROOM_BYTES
    except OSError:
        return False


def settings_data_dir() -> Path | None:
    """The panel's data folder (SQLite's), or None where the settings have none or do not load."""
    try:
        from django.conf import settings

        folder = getattr(settings, "DATA_DIR", None)
    except Exception:  # noqa: BLE001 - asked while reporting another error: never raise a second one
        return None
    return Path(folder) if folder else None

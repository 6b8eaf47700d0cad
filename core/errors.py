"""Errors shared by every app."""

from __future__ import annotations


class ImmutableError(RuntimeError):
    """Raised when code tries to change a row that is history."""


DISK_FULL_SENTENCE = (
    "The panel's disk is full: this change was not saved. Free space on the disk holding the panel's data "
    "(or the database's), then try again."
)


def is_disk_full(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) says the disk or a quota is full: an OSError with ENOSPC or
    EDQUOT, SQLite's "database or disk is full", PostgreSQL's disk_full (SQLSTATE 53100)."""
    from core.atomicfile import is_disk_full_os_error

    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if is_disk_full_os_error(seen):
            return True
        if getattr(seen, "sqlstate", None) == "53100" or "database or disk is full" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False

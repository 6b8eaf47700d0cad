"""Files a reader never sees half-written: write a temporary file beside the target, flush it to
the disk, rename it over the target, then flush the folder (so the rename itself survives a power
loss). A crash or a full disk at any moment leaves the old file or the new one, never a mix; the
temporary file is removed when the write fails.

Pure (the standard library only): the agent's state files, its outbox, a download's checksum
marker and the panel's backups all write through here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO

TMP_SUFFIX = ".tmp"


def tmp_path_for(path: Path) -> Path:
    """The temporary name a write of `path` uses: hidden, in the same folder, per process and thread
    (two threads of one agent writing the same file must not rename each other's temporary file)."""
    return path.with_name(f".{path.name}.{os.getpid()}_{threading.get_native_id()}{TMP_SUFFIX}")


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike[str], *, mode: int = 0o600, binary: bool = False) -> Iterator[IO]:
    """Open a temporary file for writing (created with `mode`, never wider); on a clean exit it
    is flushed to the disk and renamed to `path`; on any error it is removed and `path` is as it was."""
    target = Path(path)
    tmp = tmp_path_for(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if is_disk_full_os_error(exc):
            raise DiskFullError(target) from exc
        raise
    fsync_dir(target.parent)


class DiskFullError(OSError):
    """A write found the disk (or the user's quota) full; what was there before is kept."""

    def __init__(self, path: Path, *, kept: str = " (the previous one is kept)") -> None:
        super().__init__(errno.ENOSPC, f"The disk holding {path.parent} is full: {path.name} was not written{kept}")


def is_disk_full_os_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, mode: int = 0o600) -> None:
    """Write `data` to `path` atomically (see the module's docstring)."""
    with atomic_writer(path, mode=mode, binary=isinstance(data, bytes)) as handle:
        handle.write(data)


def fsync_file(path: Path) -> None:
    """Flush a file another writer made (a database copy, a dump) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename, a new file) to the disk; a no-op where unsupported."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def remove_stale_tmp(folder: Path) -> int:
    """Remove the temporary files of writers that died (their pid is gone) from `folder`; a live
    writer's file is left alone. Returns how many went."""
    removed = 0
    with contextlib.suppress(OSError):
        for entry in folder.iterdir():
            name = entry.name
            if not (name.startswith(".") and name.endswith(TMP_SUFFIX)):
                continue
            pid = name.removesuffix(TMP_SUFFIX).rpartition(".")[2].partition("_")[0]
            if pid.isdigit() and _alive(int(pid)):
                continue
            with contextlib.suppress(OSError):
                entry.unlink()
                removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

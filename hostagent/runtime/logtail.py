"""Read the last lines of a (possibly huge) log file with bounded memory, secrets masked.

Engines print secrets more often than one would think: vLLM logs its non-default
arguments, `api_key` included. Masking (core.secrets_mask) uses the exact secret values when
the caller knows them, and patterns for the common shapes (API-key arguments, tokens, bearer
headers, URLs with credentials) so that a worker that restarted, and no longer holds the
values, still masks the usual leaks.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from core.secrets_mask import mask_text

_BLOCK = 64 * 1024
_MAX_LINE = 4096  # longer lines are cut: a log tail is for reading, not for reassembly


def tail_lines(
    path: str | os.PathLike[str],
    lines: int = 200,
    *,
    secrets: Iterable[str] = (),
    start_offset: int = 0,
) -> list[str]:
    """The last `lines` lines of `path` after byte `start_offset`, masked.

    Reads backwards in 64 KiB blocks, so a multi-gigabyte log costs a few blocks. A
    missing file gives an empty list.
    """
    if lines <= 0:
        return []
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; size needed first
    except FileNotFoundError:
        return []
    with fh:
        end = fh.seek(0, os.SEEK_END)
        pos = end
        data = b""
        max_bytes = lines * _MAX_LINE + _BLOCK
        while pos > start_offset and data.count(b"\n") <= lines and len(data) < max_bytes:
            step = min(_BLOCK, pos - start_offset)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    text = data.decode("utf-8", "replace").replace("\r\n", "\n")
    parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    if pos > start_offset and parts:
        parts = parts[1:]  # the first piece may be a partial line
    secrets = list(secrets)
    return [mask_text(line[:_MAX_LINE], secrets) for line in parts[-lines:]]


def file_size(path: str | os.PathLike[str]) -> int:
    try:
        return Path(path).stat().st_size
    except FileNotFoundError:
        return 0


def read_lines(
    path: str | os.PathLike[str], offset: int, *, max_bytes: int = 256 * 1024, secrets: Iterable[str] = ()
) -> tuple[list[str], int]:
    """The whole lines of `path` from byte `offset` (at most about `max_bytes`), masked, and the
    offset just after the last one: a partial last line waits for its newline, unless it is
    longer than a log line may be. A missing file, or one shorter than `offset`, gives nothing."""
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return [], offset
    with fh:
        if fh.seek(0, os.SEEK_END) <= offset:
            return [], offset
        fh.seek(offset)
        data = fh.read(max_bytes)
    cut = data.rfind(b"\n") + 1
    if cut == 0:
        if len(data) < _MAX_LINE:
            return [], offset
        cut = len(data)
    text = data[:cut].decode("utf-8", "replace").replace("\r\n", "\n")
    parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    secrets = list(secrets)
    return [mask_text(line[:_MAX_LINE], secrets) for line in parts], offset + cut

"""Read the last lines of a (possibly huge) log file with bounded memory, secrets masked.

Engines print secrets more often than one would think: vLLM logs its non-default
arguments, `api_key` included. Masking uses the exact secret values when the caller knows
them, and patterns for the common shapes (API-key arguments, Hugging Face tokens, bearer
headers) so that a worker that restarted, and no longer holds the values, still masks
the usual leaks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from deployments.engines.base import MASK, mask_secrets

_BLOCK = 64 * 1024
_MAX_LINE = 4096  # longer lines are cut: a log tail is for reading, not for reassembly

_PATTERNS = [
    # --api-key VALUE, --api-key=VALUE, --hf-token VALUE
    re.compile(r"(--(?:api-key|hf-token)(?:=|\s+))([^\s'\",\]]+)", re.IGNORECASE),
    # api_key='VALUE', "api_key": ["VALUE"], API_KEY=VALUE, HF_TOKEN=VALUE
    re.compile(
        r"(\b(?:api[_-]?keys?|hf[_-]?token|hugging_face_hub_token|access[_-]?token)['\"]?\s*[:=]\s*\[?\s*['\"]?)"
        r"([^\s'\",\]]+)",
        re.IGNORECASE,
    ),
    re.compile(r"(Bearer\s+)([^\s'\",]+)", re.IGNORECASE),
    re.compile(r"()(hf_[A-Za-z0-9]{20,})"),
]


def mask_line(line: str, secrets: Iterable[str] = ()) -> str:
    """Mask exact secret values, then the known secret-bearing patterns."""
    line = mask_secrets(line, [s for s in secrets if s])
    for pattern in _PATTERNS:
        line = pattern.sub(lambda m: m.group(1) + MASK, line)
    return line


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
    return [mask_line(line[:_MAX_LINE], secrets) for line in parts[-lines:]]


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
    return [mask_line(line[:_MAX_LINE], secrets) for line in parts], offset + cut

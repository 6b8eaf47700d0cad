"""Linux process facts read from /proc, and signalling of process groups and trees.

Everything here is keyed by (pid, start time): a pid alone can be reused by the kernel
after the process exits, so a pid file without the start time could make us signal a
stranger. Zombies (exited, not yet reaped) count as gone; engines this process started are
reaped the moment they exit (a waiter thread each), so a long-lived agent never leaves
<defunct> entries behind, whether or not anything looks at the engine again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")

# Popen objects of engines this process started, so that we can reap them (and read their
# exit code) instead of leaving zombies. Keyed by pid.
_children: dict[int, subprocess.Popen[bytes]] = {}
# Exit codes of the last children reaped, for exit_status() after reap() dropped the Popen.
_ended: dict[int, int] = {}
_ENDED_KEPT = 32


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    state: str  # R, S, D, Z, T, ...
    ppid: int
    pgid: int
    sid: int
    start_ticks: int  # clock ticks since boot; with pid, identifies one process


def read_stat(pid: int) -> ProcStat | None:
    """Parse /proc/<pid>/stat, or None if the process does not exist (or vanished)."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError, OSError):
        return None
    # comm is in parentheses and may itself contain spaces and parentheses.
    left, right = raw.find("("), raw.rfind(")")
    rest = raw[right + 2 :].split()
    return ProcStat(
        pid=pid,
        comm=raw[left + 1 : right],
        state=rest[0],
        ppid=int(rest[1]),
        pgid=int(rest[2]),
        sid=int(rest[3]),
        start_ticks=int(rest[19]),
    )


def read_cmdline(pid: int) -> list[str]:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def boot_time() -> float:
    for line in (PROC / "stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def start_time_epoch(start_ticks: int) -> float:
    """Convert a start time in clock ticks since boot to seconds since the epoch."""
    return boot_time() + start_ticks / os.sysconf("SC_CLK_TCK")


def register_child(proc: subprocess.Popen[bytes]) -> None:
    """Keep `proc` (an engine this process started) for its exit code, and reap it as it exits:
    an engine that crashes, or is stopped through its process group, never stays a zombie."""
    _children[proc.pid] = proc
    _ended.pop(proc.pid, None)
    threading.Thread(target=proc.wait, name=f"reap-{proc.pid}", daemon=True).start()


def reap(pid: int) -> int | None:
    """Reap `pid` if it is an exited engine we started; return its exit code when known.

    Only children registered here are reaped: another component's child (a test's or a
    library's Popen) keeps its exit status for its owner. A zombie counts as gone anyway.
    """
    proc = _children.get(pid)
    if proc is None:
        return None
    code = proc.poll()
    if code is not None:
        _children.pop(pid, None)
        _ended[pid] = code
        while len(_ended) > _ENDED_KEPT:
            del _ended[next(iter(_ended))]
    return code


def exit_status(pid: int) -> str | None:
    """How `pid`, an engine this process started, ended ("exit code 1", "killed by SIGKILL"),
    or None while it runs or when it is not our child (its status went to its own parent).
    A reaped child's status is remembered (the last few), so ask as often as you like."""
    proc = _children.get(pid)
    code = proc.poll() if proc is not None else _ended.get(pid)
    if code is None:
        return None
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


def is_alive(pid: int, start_ticks: int | None = None) -> bool:
    """True if `pid` runs (not a zombie) and, when given, started at `start_ticks`."""
    if pid <= 0:
        return False
    stat = read_stat(pid)
    if stat is None:
        return False
    if start_ticks is not None and stat.start_ticks != start_ticks:
        return False  # the pid was reused by another process
    if stat.state in ("Z", "X"):
        reap(pid)
        return False
    return True


def all_pids() -> list[int]:
    return [int(p.name) for p in PROC.iterdir() if p.name.isdigit()]


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`; reaps our zombies on the way."""
    members = []
    for pid in all_pids():
        stat = read_stat(pid)
        if stat is None or stat.pgid != pgid:
            continue
        if stat.state in ("Z", "X"):
            reap(pid)
            continue
        members.append(pid)
    return members


def descendants(pid: int) -> list[int]:
    """`pid` and every live process below it, parents first."""
    children: dict[int, list[int]] = {}
    for other in all_pids():
        stat = read_stat(other)
        if stat is not None and stat.state not in ("Z", "X"):
            children.setdefault(stat.ppid, []).append(other)
    tree, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def _send(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def terminate_group(pgid: int, *, grace: float, poll: float = 0.05) -> bool:
    """SIGTERM the group, wait up to `grace` s, then SIGKILL. True if it left on SIGTERM."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    if _wait_until(lambda: not group_members(pgid), grace, poll):
        return True
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    _wait_until(lambda: not group_members(pgid), 10.0, poll)
    return False


def terminate_tree(pid: int, *, grace: float, poll: float = 0.05) -> bool:
    """SIGTERM `pid` and its descendants, then SIGKILL survivors. True if graceful.

    Used for processes we did not start: their process group may include unrelated
    processes (a shell, a test runner), so we never signal the group.
    """
    tree = descendants(pid)
    starts = {p: (s.start_ticks if (s := read_stat(p)) else None) for p in tree}
    for member in tree:
        _send(member, signal.SIGTERM)

    def gone() -> bool:
        return not any(is_alive(p, starts[p]) for p in tree)

    if _wait_until(gone, grace, poll):
        return True
    for member in tree:
        if is_alive(member, starts[member]):
            _send(member, signal.SIGKILL)
    _wait_until(gone, 10.0, poll)
    return False


def _wait_until(predicate: Callable[[], bool], timeout: float, poll: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)

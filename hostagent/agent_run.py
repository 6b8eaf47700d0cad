"""Whether this host's previous agent ended cleanly: a file in the host's state folder says an
agent runs (its pid, the process's start and the machine's boot), written at start and removed
when the agent stops cleanly. Found at the next start with its process gone, the previous run
was killed, crashed or lost to a reboot: the agent reports it (serving.host_events), so the
host's events page and the notification rules know.

    ended = previous_run_unclean(state)   # the reason, or None
    run_begins(state)
    ...
    run_ends(state)                       # in the agent's `finally`
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from hostagent.runtime.processes import is_alive, read_stat
from hostagent.runtime.state import read_json, write_json

RUN_FILE = "agent-run.json"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


def previous_run_unclean(state: Path) -> str | None:
    """Why the previous agent's run ended without stopping cleanly, or None (it stopped cleanly,
    there was none, or it still runs: a second agent is not this one's business)."""
    data = read_json(state / RUN_FILE)
    if data is None:
        return None
    pid = data.get("pid") if isinstance(data.get("pid"), int) else 0
    since = data.get("started_at") or "an unknown time"
    previous = f"The previous agent (pid {pid}, started {since})"
    if data.get("boot_id") and data.get("boot_id") != boot_id():
        return f"{previous} did not stop cleanly: the machine restarted under it."
    ticks = data.get("start_ticks") if isinstance(data.get("start_ticks"), int) else None
    if pid and pid != os.getpid() and is_alive(pid, ticks):
        return None
    return f"{previous} ended without stopping cleanly: it was killed or it crashed."


def run_begins(state: Path) -> None:
    stat = read_stat(os.getpid())
    state.mkdir(parents=True, exist_ok=True)
    write_json(
        state / RUN_FILE,
        {
            "pid": os.getpid(),
            "start_ticks": stat.start_ticks if stat else None,
            "boot_id": boot_id(),
            "started_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        },
    )


def run_ends(state: Path) -> None:
    (state / RUN_FILE).unlink(missing_ok=True)

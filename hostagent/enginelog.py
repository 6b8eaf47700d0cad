"""The engine's log, sent to the panel as it grows, one engine start ("run") at a time.

The supervisor appends every start's output to one file and records where each start begins
(`EngineRecord.log_offset`). The shipper sends the whole lines after what the panel has,
masked, tagged with the run they belong to; the panel answers with the byte it has up to, so an
agent that restarted, or an answer that was lost, resumes exactly where the panel stands. A
panel that is away is tried again on the next tick: the log stays on the host's disk meanwhile.
Users never name a file: the panel only ever sees what this loop sends.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from hostagent.runtime.logtail import file_size
from hostagent.runtime.state import EngineStart
from serving.agent_reports import EngineLogChunk, EngineRun

from .panel import PanelAway, PanelError

log = logging.getLogger("controlpanel.agent")
CHUNK = 256 * 1024  # bytes per report
BACKLOG = 2 * 1024 * 1024  # more than this behind: skip to the last BACKLOG bytes (the panel keeps less anyway)
CALLS_PER_TICK = 8


@dataclass
class _Run:
    meta: EngineRun
    offset: int  # the next byte to send
    end: int | None = None  # where this run's output ends (the next start's offset), once known


def run_key(start: EngineStart) -> str:
    """A start's name: its time and pid (a watchdog restart is a new start, a new run)."""
    return f"{start.get('started_at')}|{start.get('pid')}"[:80]


class EngineLogShipper:
    def __init__(self, supervisor: Any, panel: Any) -> None:
        self.supervisor = supervisor
        self.panel = panel
        self._runs: list[_Run] = []  # the current run last; an earlier one until its tail is sent
        # Starts before this agent began were shipped by the one before it, except the last,
        # whose tail may not have been: the panel's answer says where it stands.
        self._seen: set[str] = {run_key(s) for s in self.supervisor.state.read_starts()[:-1]}

    def _starts(self) -> list[EngineStart]:
        """Every start in order, from the supervisor's journal: one that failed within a second is
        there too (engine.json names only the engine that runs now, and a failed start is cleared
        from it at once). A state folder from before the journal: the running engine's record."""
        starts: list[EngineStart] = self.supervisor.state.read_starts()
        if starts:
            return starts
        record = self.supervisor.state.read_engine()
        return [record.start()] if record is not None else []

    def _track(self) -> None:
        for start in self._starts():
            key = run_key(start)
            if key in self._seen:
                continue
            self._seen.add(key)
            for earlier in self._runs:
                if earlier.end is None:
                    earlier.end = start["log_offset"]
            meta = EngineRun(
                key=key,
                engine=start.get("engine"),
                revision_id=start.get("revision_id"),
                revision_label=start.get("revision_label"),
                started_at=start.get("started_at"),
            )
            self._runs.append(_Run(meta=meta, offset=start["log_offset"]))

    def tick(self) -> int:
        """Send what the panel lacks; the number of lines it took."""
        self._track()
        sent = 0
        calls = 0
        while self._runs and calls < CALLS_PER_TICK:
            run = self._runs[0]
            limit = run.end if run.end is not None else file_size(self.supervisor.log_path)
            if limit - run.offset > BACKLOG:
                run.offset = limit - BACKLOG
            lines, after = self.supervisor.log_since(run.offset, max_bytes=min(CHUNK, max(limit - run.offset, 0)))
            if not lines and after == run.offset:
                if run.end is not None or len(self._runs) > 1:
                    self._runs.pop(0)  # finished and sent: on to the next start
                    continue
                break
            calls += 1
            try:
                received = self.panel.engine_log(EngineLogChunk(run.meta, run.offset, after, tuple(lines)))
            except PanelAway as exc:
                log.debug("engine log not sent, the panel is away: %s", exc)
                break
            except PanelError as exc:  # a bug on one side or the other: say it, and try again later
                log.warning("the panel refused the engine log: %s", exc)
                break
            received = after if received is None else received
            if received != after and run.offset <= received <= limit:
                run.offset = received  # the panel had more (a lost answer) or less: resume there
                continue
            run.offset = after
            sent += len(lines)
        return sent

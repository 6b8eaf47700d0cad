"""Progress for one operation: stage, fraction and log lines, through the panel port; each
report answers whether a cancel was asked for.

`Reporter.in_background()` sends the reports of a stretch that does not wait for the answer
(a switch's stop, start and verification: it checks for a cancel before it touches the
engine) from a thread of their own, in order, merging what piles up while one is on its way,
so a report's round trip to the panel is no longer on the switch's clock.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Iterator

from hostagent.context import AgentContext
from hostagent.local import engine_state
from hostagent.panel import PanelAway, PanelError, PanelPort
from serving.agent_reports import Heartbeat

log = logging.getLogger("controlpanel.agent")
FLUSH_WAIT_S = 30.0  # at the end of a background stretch: what is still on its way may take this long

Report = tuple[str | None, float | None, str | None]  # stage, progress, log line


class _Sender:
    """One thread posting an operation's reports in order; reports queued meanwhile go as one."""

    def __init__(self, panel: PanelPort, op_id: str) -> None:
        self.panel = panel
        self.op_id = op_id
        self.queue: queue.Queue[Report | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"report-{op_id[:8]}")
        self.thread.start()

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            stage, fraction, lines = item[0], item[1], [item[2]] if item[2] else []
            closing = False
            while True:  # merge what waits: the newest stage and fraction, every log line
                try:
                    more = self.queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    closing = True
                    break
                stage, fraction = (
                    more[0] if more[0] is not None else stage,
                    more[1] if more[1] is not None else fraction,
                )
                if more[2]:
                    lines.append(more[2])
            try:
                self.panel.progress(self.op_id, stage=stage, progress=fraction, log="\n".join(lines) or None)
            except Exception:  # noqa: BLE001 - a report must never end the operation
                log.exception("progress of %s not reported", self.op_id)
            if closing:
                return

    def close(self, timeout: float) -> None:
        self.queue.put(None)
        self.thread.join(timeout)
        if self.thread.is_alive():
            log.warning("progress of %s still on its way after %.0f s; going on", self.op_id, timeout)


class Reporter:
    def __init__(
        self,
        panel: PanelPort,
        op_id: str,
        *,
        start: float = 0.0,
        span: float = 1.0,
        sender: _Sender | None = None,
    ) -> None:
        self.panel = panel
        self.op_id = op_id
        self.start = start
        self.span = span
        self.sender = sender

    def __call__(self, stage: str, fraction: float, message: str) -> None:
        self._send(stage, self.start + self.span * fraction, f"[{stage}] {message}")

    def log(self, message: str) -> None:
        self._send(None, None, message)

    def _send(self, stage: str | None, fraction: float | None, line: str | None) -> None:
        if self.sender is not None:
            self.sender.queue.put((stage, fraction, line))
            return
        self.panel.progress(self.op_id, stage=stage, progress=fraction, log=line)

    def cancelled(self) -> bool:
        """Ask the panel now (an empty report also keeps the operation alive)."""
        return self.panel.progress(self.op_id)

    def scaled(self, start: float, span: float) -> Reporter:
        return Reporter(self.panel, self.op_id, start=start, span=span, sender=self.sender)

    @contextlib.contextmanager
    def in_background(self, *, flush_wait: float = FLUSH_WAIT_S) -> Iterator[Reporter]:
        """A Reporter whose reports go from a thread of their own; on leaving, waits (up to
        `flush_wait` s) until they have all been sent, so what follows (an operation's end)
        reaches the panel after them."""
        sender = _Sender(self.panel, self.op_id)
        try:
            yield Reporter(self.panel, self.op_id, start=self.start, span=self.span, sender=sender)
        finally:
            sender.close(flush_wait)


def report_state(ctx: AgentContext) -> None:
    """Tell the panel what the engine does now (best effort: the heartbeat loop says it again)."""
    try:
        ctx.panel.heartbeat(Heartbeat(engine_state=engine_state(ctx.supervisor)))
    except (PanelAway, PanelError) as exc:
        logging.getLogger("controlpanel.agent").warning("engine state not reported: %s", exc)

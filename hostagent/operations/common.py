"""Progress for one operation: stage, fraction and log lines, through the panel port; each
report answers whether a cancel was asked for."""

from __future__ import annotations

import logging

from hostagent.context import AgentContext
from hostagent.local import engine_state
from hostagent.panel import PanelAway, PanelError, PanelPort


class Reporter:
    def __init__(self, panel: PanelPort, op_id: str, *, start: float = 0.0, span: float = 1.0) -> None:
        self.panel = panel
        self.op_id = op_id
        self.start = start
        self.span = span
        self.cancel_requested = False

    def __call__(self, stage: str, fraction: float, message: str) -> None:
        self.cancel_requested = self.panel.progress(
            self.op_id, stage=stage, progress=self.start + self.span * fraction, log=f"[{stage}] {message}"
        )

    def log(self, message: str) -> None:
        self.cancel_requested = self.panel.progress(self.op_id, log=message)

    def cancelled(self) -> bool:
        """Ask the panel now (an empty report also keeps the operation alive)."""
        self.cancel_requested = self.panel.progress(self.op_id)
        return self.cancel_requested

    def scaled(self, start: float, span: float) -> Reporter:
        return Reporter(self.panel, self.op_id, start=start, span=span)


def report_state(ctx: AgentContext) -> None:
    """Tell the panel what the engine does now (best effort: the heartbeat loop says it again)."""
    try:
        ctx.panel.heartbeat(engine_state=engine_state(ctx.supervisor))
    except (PanelAway, PanelError) as exc:
        logging.getLogger("controlpanel.agent").warning("engine state not reported: %s", exc)

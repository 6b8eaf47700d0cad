"""Stop the engine this host serves."""

from __future__ import annotations

from hostagent.context import AgentContext
from serving.wire import Order

from .common import Reporter, report_state
from .outcome import Outcome


def run_stop(ctx: AgentContext, order: Order) -> Outcome:
    Reporter(ctx.panel, order.id)("stopping", 0.1, "stopping the engine")
    stopped = ctx.supervisor.stop()
    report_state(ctx)
    return Outcome.succeeded({"was_running": stopped.was_running, "revision": stopped.revision_label})

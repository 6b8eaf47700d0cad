"""Stop the engine this host serves."""

from __future__ import annotations

from typing import Any

from hostagent.context import AgentContext

from .common import Reporter, report_state


def run_stop(ctx: AgentContext, order: dict[str, Any]) -> None:
    sup = ctx.supervisor
    Reporter(ctx.panel, order["id"])("stopping", 0.1, "stopping the engine")
    stopped = sup.stop()
    report_state(ctx)
    ctx.panel.finish(
        order["id"],
        state="succeeded",
        result={"was_running": stopped.was_running, "revision": stopped.revision_label},
    )

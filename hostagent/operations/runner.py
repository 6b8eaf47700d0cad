"""Begin an operation through the port, keep it alive while it runs, dispatch it by kind, and
end it whatever happens (an exception ends it failed, with the traceback)."""

from __future__ import annotations

import logging
import socket
import threading
import traceback
from collections.abc import Callable
from typing import Any

from hostagent.context import AgentContext

from . import benchmark, download, install, probe, stop, switch

log = logging.getLogger("controlpanel.agent")
OP_HEARTBEAT_S = 10.0

Handler = Callable[[AgentContext, dict[str, Any]], None]
HANDLERS: dict[str, Handler] = {
    "switch": switch.run_switch,
    "launch": switch.run_switch,  # start the active revision: the same preflight, start and health gate
    "rollback": switch.run_switch,  # a switch back to the previous revision, with the same health gate
    "stop": stop.run_stop,
    "probe": probe.run_probe,
    "benchmark": benchmark.run_benchmark,
    "install": install.run_install,
    "download": download.run_download,
    "model_delete": download.run_model_delete,
}


def _keep_alive(ctx: AgentContext, op_id: str, stop_event: threading.Event) -> None:
    """Touch the operation while it runs so the panel's reaper can tell a live worker from a dead one."""
    while not stop_event.wait(OP_HEARTBEAT_S):
        ctx.panel.progress(op_id)


def run_operation(ctx: AgentContext, op_id: str) -> None:
    order = ctx.panel.begin(op_id, worker=f"agent@{ctx.host} ({socket.gethostname()})")
    if order is None:
        log.info("operation %s is not this host's, gone or already handled; nothing to do", op_id)
        return
    handler = HANDLERS.get(str(order.get("kind")))
    if handler is None:
        ctx.panel.finish(op_id, state="failed", error=f"This agent does not know {order.get('kind')!r} operations.")
        return
    ctx.remember(order.get("revision"))
    ctx.remember(order.get("previous"))
    stop_event = threading.Event()
    beat = threading.Thread(target=_keep_alive, args=(ctx, op_id, stop_event), daemon=True, name=f"op-{op_id[:8]}")
    beat.start()
    try:
        handler(ctx, order)
    except Exception as exc:  # noqa: BLE001 - any failure must end the operation, not leave it running
        log.exception("operation %s failed", op_id)
        ctx.panel.finish(
            op_id,
            state="failed",
            error=f"{type(exc).__name__}: {exc}",
            result={"traceback": traceback.format_exc()[-4000:]},
        )
    finally:
        stop_event.set()
        beat.join(timeout=2)
        ctx.serving_poke.set()  # a switch or stop may have changed what the front door serves

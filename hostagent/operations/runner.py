"""Begin an operation through the port, keep it alive while it runs, dispatch it by kind, and
end it in one place whatever happens: the handler's Outcome, its Refused or Cancelled, or (any
other exception) failed with the traceback."""

from __future__ import annotations

import logging
import socket
import threading
import traceback
from collections.abc import Callable

from hostagent.context import AgentContext
from serving.wire import Order, WireError

from . import benchmark, download, install, probe, stop, switch
from .outcome import Ended, Outcome

log = logging.getLogger("controlpanel.agent")
OP_HEARTBEAT_S = 10.0

Handler = Callable[[AgentContext, Order], Outcome]
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


def _carry_out(ctx: AgentContext, order: Order) -> Outcome:
    """The order's handler run to its outcome, the operation kept alive meanwhile."""
    handler = HANDLERS.get(order.kind)
    if handler is None:
        return Outcome.failed(f"This agent does not know {order.kind!r} operations.")
    ctx.installs = order.host.engine_installs
    ctx.remember(order.revision)
    ctx.remember(order.previous)
    stop_event = threading.Event()
    beat = threading.Thread(
        target=_keep_alive, args=(ctx, order.id, stop_event), daemon=True, name=f"op-{order.id[:8]}"
    )
    beat.start()
    try:
        return handler(ctx, order)
    except Ended as ended:
        return ended.outcome()
    except Exception as exc:  # noqa: BLE001 - any failure must end the operation, not leave it running
        log.exception("operation %s failed", order.id)
        return Outcome.failed(f"{type(exc).__name__}: {exc}", {"traceback": traceback.format_exc()[-4000:]})
    finally:
        stop_event.set()
        beat.join(timeout=2)


def run_operation(ctx: AgentContext, op_id: str) -> None:
    try:
        order = ctx.panel.begin(op_id, worker=f"agent@{ctx.host} ({socket.gethostname()})")
    except WireError as exc:  # begun, but not an order this agent can read: it ends failed, saying why
        log.error("operation %s: the panel's order breaks the protocol: %s", op_id, exc)
        outcome = Outcome.failed(
            f"This agent cannot read the panel's order ({exc}); it needs a panel that sends each "
            f"revision's serving spec (hostagent/PROTOCOL.md)."
        )
    else:
        if order is None:
            log.info("operation %s is not this host's, gone or already handled; nothing to do", op_id)
            return
        outcome = _carry_out(ctx, order)
    try:
        ctx.panel.finish(op_id, outcome)
    finally:
        ctx.serving_poke.set()  # a switch or stop may have changed what the front door serves

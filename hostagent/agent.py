"""Start this host's agent: who it is (its token says), register with a fresh probe, then the
loops and the Celery worker on the host's own queue, one task at a time."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from django.conf import settings

from .context import AgentContext, set_current
from .local import engine_state, state_dir, supervisor_for
from .loops import start_loops, start_watchdog
from .panel import HttpPanel
from .probe import probe_local

log = logging.getLogger("controlpanel.agent")


class AgentConfigError(RuntimeError):
    pass


def host_token() -> str:
    """CONTROLPANEL_HOST_TOKEN, or the first line of CONTROLPANEL_HOST_TOKEN_FILE."""
    token = (settings.CONTROLPANEL_HOST_TOKEN or "").strip()
    path = settings.CONTROLPANEL_HOST_TOKEN_FILE
    if not token and path:
        try:
            token = Path(path).read_text().strip().splitlines()[0].strip()
        except (OSError, IndexError) as exc:
            raise AgentConfigError(f"cannot read the host token from {path}: {exc}") from exc
    if not token:
        raise AgentConfigError(
            "no host token: set CONTROLPANEL_HOST_TOKEN (or CONTROLPANEL_HOST_TOKEN_FILE) to the token an admin "
            "issued with `manage.py host token NAME` on the panel"
        )
    return token


def connect(*, name: str | None) -> tuple[AgentContext, dict[str, Any]]:
    """Reach the panel, learn which host this token is, and build the agent's context."""
    token = host_token()
    bootstrap = HttpPanel(settings.CONTROLPANEL_URL, token, outbox_dir=os.devnull, verify=_verify())
    who = bootstrap.hello()
    host = str(who.get("host") or "")
    if not host:
        raise AgentConfigError(f"the panel at {settings.CONTROLPANEL_URL} did not say which host this token is")
    if name and name.lower() != host:
        raise AgentConfigError(f"this token is {host}'s, not {name}'s")
    outbox = settings.AGENT_OUTBOX_DIR or str(state_dir(host) / "outbox")
    panel = HttpPanel(
        settings.CONTROLPANEL_URL,
        token,
        outbox_dir=outbox,
        verify=_verify(),
        report_patience=settings.AGENT_REPORT_PATIENCE_S,
    )
    return AgentContext(host=host, panel=panel, supervisor=supervisor_for(host)), who


def register(ctx: AgentContext, *, address: str) -> dict[str, Any]:
    facts, inventory = probe_local()
    facts["address"] = address
    answer = ctx.panel.register(facts=facts, inventory=inventory, engine_state=engine_state(ctx.supervisor))
    answer["nvml"] = bool(inventory.get("available"))
    return answer


def run(*, name: str | None, address: str, watchdog: bool, telemetry: bool, loglevel: str) -> None:
    from controlpanel.celery import app

    ctx, who = connect(name=name)
    set_current(ctx)
    answer = register(ctx, address=address)
    state = engine_state(ctx.supervisor)
    lost = answer.get("lost") or []
    engine = f"running {state.get('revision_label')}" if state["running"] else "stopped"
    print(  # noqa: T201 - the agent's banner
        f"Agent for {ctx.host}: queue {who['queue']}, {answer.get('gpus', 0)} GPU(s), "
        f"panel {settings.CONTROLPANEL_URL}, engine {engine}"
        + (f", {len(lost)} interrupted operation(s) marked lost" if lost else ""),
        flush=True,
    )
    use_own_broker_keys(app, who["queue"])
    stop, _threads = start_loops(ctx, telemetry=telemetry and answer["nvml"])
    dog = start_watchdog(ctx) if watchdog else None
    try:
        worker = app.Worker(
            queues=[who["queue"]],
            concurrency=1,
            pool="solo",
            hostname=f"agent@{ctx.host}",
            loglevel=loglevel,
            prefetch_multiplier=1,
            without_mingle=True,
            without_gossip=True,
        )
        worker.start()
    finally:
        stop.set()
        if dog is not None:
            dog.stop(timeout=5)


def use_own_broker_keys(app: Any, queue: str) -> None:
    """This host's unacknowledged messages under keys of its own (controlpanel.broker), the only
    ones its broker user may touch besides its queue: before the worker first connects."""
    from controlpanel.broker import host_unacked_keys

    app.conf.broker_transport_options = {**app.conf.broker_transport_options, **host_unacked_keys(queue)}


def _verify() -> str | bool:
    return settings.CONTROLPANEL_CA_BUNDLE or True

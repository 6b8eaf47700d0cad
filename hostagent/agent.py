"""Start this host's agent: who it is (its token says), register with a fresh probe, then the
loops and the Celery worker on the host's own queue, one task at a time."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from django.conf import settings

from controlpanel.broker import host_unacked_keys
from controlpanel.celery import app
from hostagent.runtime.childenv import forget_variable, host_pass_list
from serving.agent_reports import Hello, Registered, Registration
from serving.binds import lan_address
from serving.host_events import HostEventReport

from .agent_run import previous_run_unclean, run_begins, run_ends
from .context import AgentContext, set_current
from .door.service import door_settings, note_door_down, start_front_door
from .frontdoor.settings import FrontDoorSettings, SettingsError
from .local import engine_state, state_dir, supervisor_for
from .loops import start_loops, start_watchdog
from .operations.install import stop_leftover_installs
from .panel import HttpPanel
from .probe import probe_local

log = logging.getLogger("controlpanel.agent")


class AgentConfigError(RuntimeError):
    pass


TOKEN_ENV = "CONTROLPANEL_HOST_TOKEN"  # noqa: S105 - the variable's name
STDIN = "-"  # CONTROLPANEL_HOST_TOKEN_FILE=- : the token is the first line of standard input
MAX_TOKEN_BYTES = 4096


def host_token() -> str:
    """CONTROLPANEL_HOST_TOKEN, or the first line of CONTROLPANEL_HOST_TOKEN_FILE ("-": of standard
    input). Then the variable is wiped from this process's environment, /proc/<pid>/environ
    included: the token lives in memory only, and no engine or install step sees it."""
    token = (settings.CONTROLPANEL_HOST_TOKEN or "").strip()
    forget_variable(TOKEN_ENV)
    path = settings.CONTROLPANEL_HOST_TOKEN_FILE
    if not token and path == STDIN:
        token = _first_line_of_stdin()
    elif not token and path:
        try:
            token = Path(path).read_text().strip().splitlines()[0].strip()
        except (OSError, IndexError) as exc:
            raise AgentConfigError(f"cannot read the host token from {path}: {exc}") from exc
    if not token:
        raise AgentConfigError(
            "no host token: set CONTROLPANEL_HOST_TOKEN (or CONTROLPANEL_HOST_TOKEN_FILE, - for standard input) "
            "to the token an admin issued with `manage.py host token NAME` on the panel"
        )
    return token


def _first_line_of_stdin() -> str:
    """The token from standard input (a pipe from the embedded panel, or a file redirected to it);
    standard input is /dev/null afterwards, so nothing started later inherits it."""
    data = b""
    try:
        while len(data) < MAX_TOKEN_BYTES and b"\n" not in data:
            chunk = os.read(0, MAX_TOKEN_BYTES)
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise AgentConfigError(f"cannot read the host token from standard input: {exc.strerror or exc}") from exc
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    lines = data.decode(errors="replace").strip().splitlines()
    return lines[0].strip() if lines else ""


def connect(*, name: str | None) -> tuple[AgentContext, Hello]:
    """Reach the panel, learn which host this token is, and build the agent's context."""
    try:
        host_pass_list()  # a bad CONTROLPANEL_PASS_ENV stops the start, not a later launch
    except ValueError as exc:
        raise AgentConfigError(f"CONTROLPANEL_PASS_ENV: {exc}") from exc
    token = host_token()
    bootstrap = HttpPanel(settings.CONTROLPANEL_URL, token, outbox_dir=os.devnull, verify=_verify())
    who = bootstrap.hello()
    host = who.host
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


def register(ctx: AgentContext, *, address: str) -> tuple[Registered, bool]:
    """Tell the panel this agent (re)started; its answer, and whether NVML answers here."""
    probe = probe_local(address=address)
    report = Registration(facts=probe.facts, inventory=probe.inventory, engine_state=engine_state(ctx.supervisor))
    return ctx.panel.register(report), bool(probe.inventory.get("available"))


def run(*, name: str | None, address: str, watchdog: bool, telemetry: bool, loglevel: str) -> None:
    try:
        # CONTROLPANEL_LAN_ADDRESS (settings_shared) by the panel's own rule: a bad one stops the
        # start, naming it, before an engine is bound there.
        lan_address(settings.LAN_ADDRESS)
    except ValueError as exc:
        raise AgentConfigError(str(exc)) from exc
    try:
        door = door_settings()  # a bad CONTROLPANEL_FRONT_DOOR_* stops the start before anything runs
    except SettingsError as exc:
        raise AgentConfigError(str(exc)) from exc
    ctx, who = connect(name=name)
    set_current(ctx)
    state = state_dir(ctx.host)
    unclean = previous_run_unclean(state)  # killed, crashed or lost to a reboot: the panel hears of it
    run_begins(state)
    try:
        _run(
            ctx,
            who,
            door=door,
            unclean=unclean,
            address=address,
            watchdog=watchdog,
            telemetry=telemetry,
            loglevel=loglevel,
        )
    finally:
        run_ends(state)  # a clean stop: the next start reports nothing


def _run(
    ctx: AgentContext,
    who: Hello,
    *,
    address: str,
    watchdog: bool,
    telemetry: bool,
    loglevel: str,
    door: FrontDoorSettings | None,
    unclean: str | None,
) -> None:

    leftovers = stop_leftover_installs()  # a build its previous run left compiling, before the panel hears of it
    answer, nvml = register(ctx, address=address)
    # Where the host's engine versions are, before any order says so: the watchdog restarts the
    # engine, and the door loads revisions, with them (hostagent.launch.known_installs).
    ctx.installs = answer.engine_installs
    if unclean:
        log.warning("%s", unclean)
        ctx.panel.host_event(HostEventReport("agent.restarted", unclean))
    state = engine_state(ctx.supervisor)
    lost = answer.lost
    engine = f"running {state['revision_label']}" if state["running"] else "stopped"
    print(  # noqa: T201 - the agent's banner
        f"Agent for {ctx.host}: queue {who.queue}, {answer.gpus} GPU(s), "
        f"panel {settings.CONTROLPANEL_URL}, engine {engine}"
        + (f", {len(lost)} interrupted operation(s) marked lost" if lost else "")
        + (f", stopped what their install left running: {', '.join(leftovers)}" if leftovers else "")
        + (f", starting r{restore.revision} again (the panel asked)" if (restore := answer.restore) else ""),
        flush=True,
    )
    use_own_broker_keys(app, who.queue)
    try:
        relaunching = answer.restore.revision_id if answer.restore else None
        front_door = start_front_door(ctx, door=door, gpus=nvml, relaunching=relaunching)
    except OSError as exc:  # the agent's switches and reports matter more than the door: go on without it
        front_door = None
        why = (
            f"it cannot listen on {door.bind if door else '?'} ({exc.strerror or exc}); "
            "set CONTROLPANEL_FRONT_DOOR_BIND to a free HOST:PORT, or off"
        )
        log.error("front door off: %s", why)
        down = f"The front door did not start: {why}."
        note_door_down(state_dir(ctx.host), down)  # the next run's door reports it up once it answers
        ctx.panel.host_event(HostEventReport("door.down", down))
    stop, _threads = start_loops(ctx, telemetry=telemetry, gpus=nvml)
    dog = start_watchdog(ctx) if watchdog else None
    try:
        worker = app.Worker(
            queues=[who.queue],
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
        if front_door is not None:
            front_door.close()


def use_own_broker_keys(app: Any, queue: str) -> None:
    """This host's unacknowledged messages under keys of its own (controlpanel.broker), the only
    ones its broker user may touch besides its queue: before the worker first connects."""
    app.conf.broker_transport_options = {**app.conf.broker_transport_options, **host_unacked_keys(queue)}


def _verify() -> str | bool:
    return settings.CONTROLPANEL_CA_BUNDLE or True

"""A GPU host's agent: everything that runs on the host, in one place.

    agent.py        start: token -> which host, probe + register, loops, Celery worker
    panel.py        PanelPort, the one port to the panel (typed reports: serving.agent_reports), and HttpPanel
    outbox.py       reports kept on disk while the panel is away
    context.py      the running agent (host, port, supervisor, launches in memory)
    tasks.py        Celery tasks by name (serving.operation_tasks), operation id in
    operations/     switch, stop, install, benchmark, probe: a typed order in, one outcome out
    loops.py        heartbeat, GPU telemetry, engine watchdog
    launch.py       a revision's launch -> LaunchSpec (executable, bind, model folders)
    preflight.py    the host's half of the switch preflight
    binaries.py     which engine executable runs a version on this host
    local.py        state folder, supervisor, model folders, engine state
    probe.py        NVML + host facts
    frontdoor/      the host's one OpenAI endpoint for all its models (aiohttp, no Django):
                    routing by name or alias, loads on demand, keys, usage, metrics

It never touches the panel's database and holds none of its keys (controlpanel.settings_agent);
the engine runtime it drives is hostagent.runtime (OS only).
"""

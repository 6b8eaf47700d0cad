"""The agent's side of the front door (hostagent.frontdoor): it runs the door on this host, keeps
its routing and key tables in step with the panel, and loads on-demand revisions for it.

    memory.py   free bytes per device as the host measures them (NVML per GPU, MemAvailable)
    loader.py   AgentLoader: one supervised engine per on-demand revision; the pinned revision is
                the host's supervisor's, which the door proxies to and never starts twice
    tables.py   the panel's serving answer -> RoutingTable, KeyTable, limits; kept in the state folder
    service.py  FrontDoorService: the door's thread and event loop, the poll and the report

Why in the agent's process (a thread with its own event loop) and not a child process: the loader
drives the agent's supervisors and the launches the panel sent (their API keys live in the agent's
memory), and the door's tables come from the agent's panel connection, so a child would need all
of that over a pipe; in-process the door starts and stops with the agent and shares nothing but
the GIL with threads that mostly wait (heartbeat, log shipping, the Celery worker's operations).
"""

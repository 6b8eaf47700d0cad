"""What one client may hold of a front door or the lab router: its connections and how long each
may take to say what it wants (server.py's `listen()` applies them; connections.py holds the
connections).

The front door reads them from CONTROLPANEL_FRONT_DOOR_* (settings.py), the lab router from
CONTROLPANEL_ROUTER_* (controlpanel/settings.py); both are documented in docs/configuration.md,
the defaults' reasons in docs/front-door.md ("Connections").
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConnectionLimits"]


@dataclass(frozen=True)
class ConnectionLimits:
    # A connection's first request head (request line and headers) arrives whole within this many
    # seconds of connecting, else 408 and the connection is closed. A later request's head is
    # bounded by idle_timeout_s, counted from the answer before it.
    header_timeout_s: float = 10.0
    # A request's body arrives whole within this many seconds of its head (read by the handler
    # after the key check), else 408 and the connection is closed: 64 MiB at about 1 MiB/s.
    body_timeout_s: float = 60.0
    # A keep-alive connection with no request is closed after this many seconds (the router keeps
    # its idle connections to the doors 15 s, under this).
    idle_timeout_s: float = 30.0
    # Connections open at once, all clients together; past it a new one gets 503 and is closed.
    max_connections: int = 512
    # Connections open at once from one client address; past it a new one gets 503 and is closed.
    # Half the total: one address never takes the whole server, and the lab router (one address at
    # each door) or a proxy in front of the router (one address for every client) has room for a
    # full queue.
    max_connections_per_peer: int = 256

"""The front door's settings, from the host's environment (documented in docs/front-door.md)."""

from __future__ import annotations

import math
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from .limits import ConnectionLimits

__all__ = ["FrontDoorSettings", "SettingsError"]

BIND_ENV = "CONTROLPANEL_FRONT_DOOR_BIND"
LAN_ADDRESS_ENV = "CONTROLPANEL_LAN_ADDRESS"  # the default bind's address when set (docs/configuration.md)
QUEUE_MAX_ENV = "CONTROLPANEL_FRONT_DOOR_QUEUE_MAX"
QUEUE_WAIT_ENV = "CONTROLPANEL_FRONT_DOOR_QUEUE_WAIT"
DRAIN_TIMEOUT_ENV = "CONTROLPANEL_FRONT_DOOR_DRAIN_TIMEOUT"
MEMORY_SETTLE_ENV = "CONTROLPANEL_FRONT_DOOR_MEMORY_SETTLE"
# One key's share of the door, and a load's own deadline (issue 37).
KEY_INFLIGHT_MAX_ENV = "CONTROLPANEL_FRONT_DOOR_KEY_INFLIGHT_MAX"
KEY_QUEUE_SHARE_ENV = "CONTROLPANEL_FRONT_DOOR_KEY_QUEUE_SHARE"
LOAD_TIMEOUT_ENV = "CONTROLPANEL_FRONT_DOOR_LOAD_TIMEOUT"
# Swaps (issue 39): how long a loaded model finishes its turn, and the host's cores for CPU engines.
TURN_ENV = "CONTROLPANEL_FRONT_DOOR_TURN"
TURN_LINGER_ENV = "CONTROLPANEL_FRONT_DOOR_TURN_LINGER"
CORES_ENV = "CONTROLPANEL_FRONT_DOOR_CORES"
# Connections and /metrics (limits.py; docs/front-door.md, "Connections").
HEADER_TIMEOUT_ENV = "CONTROLPANEL_FRONT_DOOR_HEADER_TIMEOUT"
BODY_TIMEOUT_ENV = "CONTROLPANEL_FRONT_DOOR_BODY_TIMEOUT"
IDLE_TIMEOUT_ENV = "CONTROLPANEL_FRONT_DOOR_IDLE_TIMEOUT"
MAX_CONNECTIONS_ENV = "CONTROLPANEL_FRONT_DOOR_MAX_CONNECTIONS"
MAX_CONNECTIONS_PER_PEER_ENV = "CONTROLPANEL_FRONT_DOOR_MAX_CONNECTIONS_PER_PEER"
METRICS_TOKEN_ENV = "CONTROLPANEL_FRONT_DOOR_METRICS_TOKEN"  # noqa: S105 - its name, not a token


class SettingsError(ValueError):
    pass


@dataclass(frozen=True)
class FrontDoorSettings:
    host: str = "127.0.0.1"
    port: int = 4000
    queue_max: int = 256  # requests waiting for a model to load, all models of the host together
    queue_wait_s: float = 300.0  # longest a request waits for its model before a 503
    drain_timeout_s: float = 120.0  # longest an unload waits for the model's requests in flight
    memory_settle_s: float = 10.0  # after unloading, how long freed memory may take to show as free
    # One key's share of the door, and a load's own deadline (issue 37). A "key" is an inference
    # key; on an open door (no keys), each client address counts as one.
    key_inflight_max: int = 32  # requests one key may have answered or waiting at once; 0: no cap
    key_queue_share: float = 0.5  # the fraction of `queue_max` one key's waiting requests may take
    load_timeout_s: float = 900.0  # longest one load may take (start to health) before it fails
    # Swaps (issue 39). Once a request waits for a model that needs a loaded one's room, the loaded
    # one keeps taking its own requests for at most `turn_s` (counted from that request's arrival,
    # within the drain timeout), and is swapped out as soon as it has none in flight.
    turn_s: float = 5.0
    turn_linger_s: float = 0.05  # once it has none in flight, how long its turn waits for its clients' next request
    cores: int = 0  # CPU cores engines may share (a table entry's `threads`); 0: this process's affinity

    # --- Connections and /metrics: what one client may hold of the door (limits.py says each) ---
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    metrics_token: str = field(default="", repr=False)  # set: GET /metrics needs `Authorization: Bearer <token>`
    # The `host` label of the engines' series on /metrics: the host's name in the panel (the agent
    # sets it); "" is this machine's short hostname.
    host_name: str = ""

    @property
    def host_label(self) -> str:
        return self.host_name or socket.gethostname().split(".")[0].lower() or "localhost"

    @property
    def bind(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> FrontDoorSettings:
        host, port = parse_bind(environ.get(BIND_ENV) or default_bind(environ))
        return cls(
            host=host,
            port=port,
            queue_max=int(_number(environ, QUEUE_MAX_ENV, cls.queue_max, minimum=0)),
            queue_wait_s=_number(environ, QUEUE_WAIT_ENV, cls.queue_wait_s, minimum=0.0),
            drain_timeout_s=_number(environ, DRAIN_TIMEOUT_ENV, cls.drain_timeout_s, minimum=0.0),
            memory_settle_s=_number(environ, MEMORY_SETTLE_ENV, cls.memory_settle_s, minimum=0.0),
            # One key's share of the door, and a load's own deadline (issue 37).
            key_inflight_max=int(_number(environ, KEY_INFLIGHT_MAX_ENV, cls.key_inflight_max, minimum=0)),
            key_queue_share=_share(environ),
            load_timeout_s=_number(environ, LOAD_TIMEOUT_ENV, cls.load_timeout_s, minimum=1.0),
            turn_s=_number(environ, TURN_ENV, cls.turn_s, minimum=0.0),
            turn_linger_s=_number(environ, TURN_LINGER_ENV, cls.turn_linger_s, minimum=0.0),
            cores=int(_number(environ, CORES_ENV, cls.cores, minimum=0)),
            # Connections and /metrics
            limits=_limits(environ),
            metrics_token=(environ.get(METRICS_TOKEN_ENV) or "").strip(),
        )


def _limits(environ: Mapping[str, str]) -> ConnectionLimits:
    """The connection limits the environment sets, ConnectionLimits' own defaults for the rest."""
    return ConnectionLimits(
        header_timeout_s=_number(environ, HEADER_TIMEOUT_ENV, ConnectionLimits.header_timeout_s, minimum=0.1),
        body_timeout_s=_number(environ, BODY_TIMEOUT_ENV, ConnectionLimits.body_timeout_s, minimum=0.1),
        idle_timeout_s=_number(environ, IDLE_TIMEOUT_ENV, ConnectionLimits.idle_timeout_s, minimum=0.1),
        max_connections=int(_number(environ, MAX_CONNECTIONS_ENV, ConnectionLimits.max_connections, minimum=1)),
        max_connections_per_peer=int(
            _number(environ, MAX_CONNECTIONS_PER_PEER_ENV, ConnectionLimits.max_connections_per_peer, minimum=1)
        ),
    )


def default_bind(environ: Mapping[str, str]) -> str:
    """Without CONTROLPANEL_FRONT_DOOR_BIND: port 4000 on CONTROLPANEL_LAN_ADDRESS, else on loopback."""
    lan = (environ.get(LAN_ADDRESS_ENV) or "").strip().strip("[]")
    if not lan:
        return "127.0.0.1:4000"
    return f"[{lan}]:4000" if ":" in lan else f"{lan}:4000"


def parse_bind(value: str) -> tuple[str, int]:
    """ "127.0.0.1:4000", "0.0.0.0:4000", "[::1]:4000" -> (host, port)."""
    host, sep, port = value.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SettingsError(f"{BIND_ENV} must be HOST:PORT (e.g. 127.0.0.1:4000), not {value!r}")
    return host, int(port)


def _number(environ: Mapping[str, str], name: str, default: float, *, minimum: float) -> float:
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, not {raw!r}") from None
    if not math.isfinite(value) or value < minimum:
        raise SettingsError(f"{name} must be at least {minimum}, not {raw!r}")
    return value


def _share(environ: Mapping[str, str]) -> float:
    share = _number(environ, KEY_QUEUE_SHARE_ENV, FrontDoorSettings.key_queue_share, minimum=0.0)
    if not 0 < share <= 1:
        raise SettingsError(f"{KEY_QUEUE_SHARE_ENV} must be above 0 and at most 1, not {share:g}")
    return share

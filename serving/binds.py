"""Bind addresses as the panel and the serving core read them: `HOST:PORT` as the front door's
CONTROLPANEL_FRONT_DOOR_BIND and its reports give it, and whether an address is this machine only.
The front door itself loads nothing of the project (tests/test_layers.py) and reads its setting
with the same rule in hostagent/frontdoor/settings.py (parse_bind)."""

from __future__ import annotations

import ipaddress

__all__ = ["FRONT_DOOR_BIND_ENV", "FRONT_DOOR_DEFAULT_BIND", "is_loopback", "is_wildcard", "split_bind"]

FRONT_DOOR_BIND_ENV = "CONTROLPANEL_FRONT_DOOR_BIND"
FRONT_DOOR_DEFAULT_BIND = "127.0.0.1:4000"


def split_bind(value: str) -> tuple[str, int]:
    """ "127.0.0.1:4000", "0.0.0.0:4000", "[::1]:4000" -> (host, port); ValueError otherwise."""
    host, sep, port = value.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{FRONT_DOOR_BIND_ENV} must be HOST:PORT (e.g. {FRONT_DOOR_DEFAULT_BIND}), not {value!r}")
    return host, int(port)


def is_loopback(address: str) -> bool:
    """`localhost`, 127.0.0.0/8 or ::1 (brackets allowed): reachable from this machine only."""
    name = address.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_wildcard(address: str) -> bool:
    """A bind on every interface (0.0.0.0, ::): where a server listens, never where to connect."""
    return address.strip().strip("[]") in ("0.0.0.0", "::")  # noqa: S104 - names, not a bind

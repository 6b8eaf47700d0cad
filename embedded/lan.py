"""Where the embedded panel serves (docs/configuration.md, "Serving the LAN"), checked before the
supervisor (embedded.panel) starts anything: a bind the panel cannot serve stops the start
with one sentence naming the setting, instead of a panel that stops itself half a minute later.

What cannot work: an address that is not this machine's (nothing can listen there), the panel's
port taken by another program, and allowed hosts (DJANGO_ALLOWED_HOSTS) that leave out the address
the local agent reaches the panel at (its hello would be refused 400 until the supervisor gave up).
"""

from __future__ import annotations

import errno
import os
import socket

from serving.binds import FRONT_DOOR_BIND_ENV, LAN_ADDRESS_ENV, front_door_bind, is_wildcard, join_bind, split_bind


def agent_url(bind: str) -> str:
    """The panel's URL for the agent on this machine: its bind, on loopback when it listens on
    every interface."""
    host, port = split_bind(bind)
    return f"http://{join_bind('127.0.0.1' if is_wildcard(host) else host, port)}"


def _named(setting: str, value: str) -> str:
    """`PANEL_BIND=10.0.0.5:8000`, or the LAN setting when the value came from it."""
    if setting in os.environ or not os.environ.get(LAN_ADDRESS_ENV, "").strip():
        return f"{setting}={value}"
    return f"{setting}={value} (from {LAN_ADDRESS_ENV})"


def _cannot_listen(host: str, port: int) -> OSError | None:
    """The error listening on (host, port) would meet now (port 0: any port, the address only)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn and aiohttp do
            sock.bind((host, port))
            if port:
                sock.listen(1)
    except OSError as exc:
        return exc
    return None


def bind_refusal(setting: str, bind: str, *, port_too: bool = False) -> str:
    """Why nothing can listen at `bind` on this machine ("" when something can)."""
    try:
        host, port = split_bind(bind)
    except ValueError:
        return f"{setting} must be HOST:PORT (e.g. 127.0.0.1:8000), not {bind!r}."
    if is_wildcard(host):
        host = "::" if ":" in host else "0.0.0.0"  # noqa: S104 - a wildcard bind, checked as written
    exc = _cannot_listen(host, port if port_too else 0)
    if exc is None:
        return ""
    if exc.errno == errno.EADDRINUSE:
        return (
            f"{_named(setting, bind)}: port {port} is taken by another program; set a free port, or stop that program."
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"{_named(setting, bind)}: {host} is not an address of this machine, so nothing can listen there; "
            "set one of this machine's addresses (`ip -brief address` lists them)."
        )
    return f"{_named(setting, bind)}: cannot listen there ({exc.strerror or exc})."


def serving_refusals(bind: str) -> list[str]:
    """What stops the embedded panel from serving at `bind` with these settings: one sentence each,
    naming the setting (empty when it can start)."""
    from django.conf import settings
    from django.http.request import validate_host

    found = [bind_refusal("PANEL_BIND", bind)]  # its port: once an earlier run's leftovers are stopped
    if found[0]:
        return found
    if settings.ROUTER_HOST is not None:
        found.append(bind_refusal("CONTROLPANEL_ROUTER_BIND", settings.ROUTER_BIND))
    door = front_door_bind(os.environ)
    if door.lower() != "off":
        found.append(bind_refusal(FRONT_DOOR_BIND_ENV, door))
    host = split_bind(bind)[0]
    reached = "127.0.0.1" if is_wildcard(host) else host
    header = f"[{reached}]" if ":" in reached else reached
    if not validate_host(header, settings.ALLOWED_HOSTS):
        found.append(
            f"DJANGO_ALLOWED_HOSTS={','.join(settings.ALLOWED_HOSTS)} leaves out {header}, where PANEL_BIND={bind} "
            f"is reached: the panel would refuse its own agent (400) and every browser there; add {header} to "
            "DJANGO_ALLOWED_HOSTS, or leave it unset (it follows the bind)."
        )
    return [f for f in found if f]


def serving_warnings(bind: str, allowed_hosts: list[str]) -> list[str]:
    """What serves, but not what the bind suggests: a panel listening on every interface that
    answers only for this machine's names (a browser on the LAN would get 400)."""
    host = split_bind(bind)[0]
    if not is_wildcard(host) or "*" in allowed_hosts:
        return []
    local = {"localhost", "127.0.0.1", "[::1]", "testserver"}
    if set(allowed_hosts) - local:
        return []
    return [
        f"PANEL_BIND={bind} listens on every interface, but the panel answers only for {', '.join(allowed_hosts)}: "
        f"browsers on the LAN get 400; set {LAN_ADDRESS_ENV} to this machine's LAN address (or DJANGO_ALLOWED_HOSTS)."
    ]

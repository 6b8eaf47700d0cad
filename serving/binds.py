"""Bind addresses as the panel and the serving core read them: `HOST:PORT` as the front door's
CONTROLPANEL_FRONT_DOOR_BIND and its reports give it, and whether an address is this machine only.
The front door itself loads nothing of the project (tests/test_layers.py) and reads its setting
with the same rule in hostagent/frontdoor/settings.py (parse_bind).

The one loopback rule (`address_refusal`): every address the panel reaches (the lab router, the
playground) or hands out (client exports, the router's URL) is judged by what it really is, not by
how it is written. A literal is read as the system's resolver reads it (`127.1`, `0x7f000001`,
`2130706433` and `017700000001` are all 127.0.0.1: socket.inet_aton's legacy forms, which
getaddrinfo and so every HTTP client accept), an IPv4-mapped IPv6 address as its IPv4 one, and a
name by what it resolves to (`resolve`, the caller's: this module does no I/O of its own beyond
`system_resolve`). Refused: loopback (127/8, ::1), "this network" and unspecified (0/8, ::),
IPv4-compatible IPv6 (::/96, deprecated, read as IPv4 by some stacks), link-local (169.254/16, the
cloud metadata service among them, fe80::/10) and the names `localhost` and `*.localhost`."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Mapping

__all__ = [
    "FRONT_DOOR_BIND_ENV",
    "FRONT_DOOR_DEFAULT_BIND",
    "LAN_ADDRESS_ENV",
    "Resolver",
    "address_ips",
    "address_refusal",
    "canonical_address",
    "front_door_bind",
    "ip_refusal",
    "is_loopback",
    "is_wildcard",
    "join_bind",
    "lan_address",
    "literal_ip",
    "split_bind",
    "system_resolve",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str], Iterable[str]]  # a name -> the addresses it resolves to (OSError: none)

_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_REACHES_ITSELF = "every machine reaches it as itself"

FRONT_DOOR_BIND_ENV = "CONTROLPANEL_FRONT_DOOR_BIND"
FRONT_DOOR_DEFAULT_BIND = "127.0.0.1:4000"
LAN_ADDRESS_ENV = "CONTROLPANEL_LAN_ADDRESS"


def split_bind(value: str) -> tuple[str, int]:
    """ "127.0.0.1:4000", "0.0.0.0:4000", "[::1]:4000" -> (host, port); ValueError otherwise."""
    host, sep, port = value.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{FRONT_DOOR_BIND_ENV} must be HOST:PORT (e.g. {FRONT_DOOR_DEFAULT_BIND}), not {value!r}")
    return host, int(port)


def _bare(address: str) -> str:
    """ "[::1]" -> "::1", "fe80::1%eth0" -> "fe80::1", trailing dot and case dropped."""
    text = address.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return text.split("%", 1)[0].rstrip(".").lower()


def literal_ip(address: str) -> IPAddress | None:
    """The address `address` is written as, in any spelling the system's resolver accepts
    (`127.1`, `0x7f000001`, `2130706433`, `::ffff:127.0.0.1`, `[::1]`); None for a name."""
    text = _bare(address)
    if not text:
        return None
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    # inet_aton's legacy forms (one to four parts, decimal, octal or hex); glibc would also take
    # anything after a space, so only a bare run of those characters is read.
    if not all(c in "0123456789abcdefx." for c in text) or not text[0].isdigit():
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        return None


def canonical_address(address: str) -> str:
    """How an address is stored: a literal in its canonical form (`10.1` -> `10.0.0.1`, no
    brackets), a name lower-cased without a trailing dot."""
    ip = literal_ip(address)
    return str(ip) if ip is not None else _bare(address)


def ip_refusal(ip: IPAddress) -> str:
    """Why the panel may not reach or hand out `ip` ("" when it may): what kind of address it is."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            why = ip_refusal(ip.ipv4_mapped)
            return f"{why} (IPv4-mapped)" if why else ""
        if ip in _IPV4_COMPATIBLE and not (ip.is_loopback or ip.is_unspecified):
            return "an IPv4-compatible IPv6 address (deprecated; some systems read it as IPv4)"
    if ip.is_loopback:
        return f"a loopback address: {_REACHES_ITSELF}"
    if ip.is_unspecified or (isinstance(ip, ipaddress.IPv4Address) and ip in _THIS_NETWORK):
        return f'an unspecified address ("this machine"): {_REACHES_ITSELF}'
    if ip.is_link_local:
        return "a link-local address (where the cloud metadata service answers)"
    return ""


def system_resolve(name: str) -> list[str]:
    """What `name` resolves to on this machine (socket.getaddrinfo); OSError when nothing."""
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)})


def address_ips(address: str, *, resolve: Resolver | None = None) -> list[IPAddress]:
    """The addresses `address` reaches: the literal it is, or what `resolve` makes of the name
    (empty without a resolver). OSError from `resolve` when a name does not resolve."""
    ip = literal_ip(address)
    if ip is not None:
        return [ip]
    if resolve is None:
        return []
    return [ipaddress.ip_address(_bare(found)) for found in resolve(_bare(address))]


def address_refusal(address: str, *, resolve: Resolver | None = None) -> str:
    """The one loopback rule: why the panel may not reach or hand out `address` ("" when it may).
    Names are judged by every address `resolve` gives (a name that also resolves to a public
    address is no safer); a name that does not resolve is not refused here (clients may resolve
    it elsewhere): whoever connects uses the addresses judged (`address_ips`)."""
    text = _bare(address)
    if not text:
        return "no address is set"
    if text == "localhost" or text.endswith(".localhost") or text == "localhost.localdomain":
        return f"{text} is a loopback name: {_REACHES_ITSELF}"
    try:
        ips = address_ips(address, resolve=resolve)
    except (OSError, ValueError):
        return ""
    for ip in ips:
        why = ip_refusal(ip)
        if why:
            shown = str(ip.ipv4_mapped) if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped else str(ip)
            return f"{text} is {why}" if shown == text else f"{text} is {shown}, {why}"
    return ""


def is_loopback(address: str) -> bool:
    """`localhost`, 127.0.0.0/8 or ::1 (brackets allowed, any spelling: `127.1`, `::ffff:127.0.0.1`):
    reachable from this machine only."""
    name = _bare(address)
    if name == "localhost" or name.endswith(".localhost"):
        return True
    ip = literal_ip(name)
    if ip is None:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def is_wildcard(address: str) -> bool:
    """A bind on every interface (0.0.0.0, ::): where a server listens, never where to connect."""
    ip = literal_ip(address)
    return ip is not None and ip.is_unspecified


def join_bind(host: str, port: int) -> str:
    """(host, port) -> "HOST:PORT", an IPv6 literal in brackets: what gunicorn and the doors take."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def lan_address(value: str) -> str:
    """CONTROLPANEL_LAN_ADDRESS as the panel uses it: "" (unset: everything on loopback) or this
    machine's address on its LAN, an IP literal in canonical form that the one loopback rule
    accepts (servers bind it, so a name would not do). ValueError: one sentence naming the setting."""
    text = value.strip()
    if not text:
        return ""
    ip = literal_ip(text)
    if ip is None:
        raise ValueError(
            f"{LAN_ADDRESS_ENV} must be this machine's IP address on its LAN (e.g. 192.168.1.20), not {value!r}: "
            "the panel, its engines, the front door and the lab router listen on it."
        )
    why = ip_refusal(ip)
    if why:
        raise ValueError(
            f"{LAN_ADDRESS_ENV}={text} is {why}; set the address other machines reach this one at "
            "(e.g. 192.168.1.20), or leave it unset to serve this machine only."
        )
    return str(ip)


def front_door_bind(environ: Mapping[str, str]) -> str:
    """Where the host's front door listens: CONTROLPANEL_FRONT_DOOR_BIND (or `off`), else port 4000
    on CONTROLPANEL_LAN_ADDRESS, else FRONT_DOOR_DEFAULT_BIND. The door itself reads it with the
    same rule (hostagent/frontdoor/settings.py, default_bind), loading nothing of the project."""
    given = (environ.get(FRONT_DOOR_BIND_ENV) or "").strip()
    if given:
        return given
    lan = (environ.get(LAN_ADDRESS_ENV) or "").strip().strip("[]")
    return join_bind(lan, 4000) if lan else FRONT_DOOR_DEFAULT_BIND

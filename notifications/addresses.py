"""Where a notification may be sent: public addresses, and the internal networks an admin allows
(NOTIFICATIONS_ALLOWED_NETWORKS, from CONTROLPANEL_NOTIFY_ALLOWED_NETWORKS).

A channel URL is typed by a person, so without this the panel's worker would post to whatever it
names: the cloud metadata service (169.254.169.254), the panel's own Redis and database on
loopback, or any port of the lab's private networks, telling open from closed ports by its error.

Names are judged by what they resolve to, through the same resolver the transports use
(`socket.getaddrinfo`, which also reads `2130706433`, `0x7f.1` and `017700000001` as 127.0.0.1).
`guarded()` holds every connection one send makes, in this thread, to that rule at the moment it
connects: each lookup the transport does (redirects, Matrix's delegation, an SMTP host) is judged,
and refused before any connection when one of its addresses is not allowed; the transport then
connects to exactly the addresses judged, so a name that resolves elsewhere a second later
(DNS rebinding) gains nothing.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
SETTING = "CONTROLPANEL_NOTIFY_ALLOWED_NETWORKS"
METADATA = ipaddress.ip_address("169.254.169.254")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def networks_parse(values: Iterable[str]) -> list[IPNetwork]:
    """`10.0.5.0/24`, `192.168.1.10` (one address), `fd00::/8`; ValueError naming the bad entry."""
    networks: list[IPNetwork] = []
    for value in values:
        value = value.strip()
        if not value:
            continue
        try:
            networks.append(ipaddress.ip_network(value, strict=False))
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a network (e.g. 10.0.5.0/24) or an address: {exc}") from exc
    return networks


def _embedded(ip: IPAddress) -> list[IPAddress]:
    """The address `ip` really reaches: an IPv4-mapped IPv6 address is its IPv4 one; 6to4, NAT64 and
    Teredo addresses carry an IPv4 address that a relay would reach, judged as well."""
    if isinstance(ip, ipaddress.IPv4Address):
        return [ip]
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip in _NAT64:  # DNS64 answers an IPv6-only network's lookups of public names with these
        return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    found: list[IPAddress] = [ip]
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return found


def _kind(ip: IPAddress) -> str:
    """Why `ip` is internal, as "a loopback address" ("" when it is a public address)."""
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip == METADATA:
        return "a link-local address (the cloud metadata service)"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_reserved:
        return "a reserved address"
    if ip.is_private:
        return "a private address"
    if not ip.is_global:
        return "a non-public address"
    return ""


def address_refusal(address: str, allowed: Iterable[IPNetwork]) -> str:
    """Why the panel may not connect to `address` ("" when it may): what kind of internal address
    it is, unless it lies in one of the `allowed` networks."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # fe80::1%eth0: the zone is not the address
    allowed = list(allowed)
    for reached in _embedded(ip):
        if any(reached.version == net.version and reached in net for net in allowed):
            continue
        kind = _kind(reached)
        if kind:
            return f"{reached} is {kind}"
    return ""


def refusal_message(why: str) -> str:
    return (
        f"The channel's host is or resolves to an address the panel does not send to: {why}. Internal "
        f"networks are allowed only when {SETTING} lists them (e.g. {SETTING}=10.0.5.0/24)."
    )


class AddressRefused(ValueError):
    """A host resolves to an address the panel may not connect to; the message says which and why."""


_real_getaddrinfo = socket.getaddrinfo


def resolve_checked(host: str, port: int | None, allowed: Iterable[IPNetwork]) -> list[Any]:
    """`socket.getaddrinfo(host, port)`, or AddressRefused when any address it yields is not allowed
    (all are refused: a name that also resolves to a public address is no safer). OSError when the
    name does not resolve."""
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    results = _real_getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    _check(results, list(allowed))
    return results


def _check(results: list[Any], allowed: list[IPNetwork]) -> None:
    for family, *_, sockaddr in results:
        if family not in (socket.AF_INET, socket.AF_INET6):
            raise AddressRefused(refusal_message(f"{sockaddr!r} is not an internet address"))
        why = address_refusal(str(sockaddr[0]), allowed)
        if why:
            raise AddressRefused(refusal_message(why))


@dataclass
class Guard:
    """What one guarded send ran into: the first refusal, if any; whether its last HTTP request got
    an answer (a status line, whatever the status) or ended without one (None: no HTTP request)."""

    allowed: list[IPNetwork]
    refused: str = ""
    answered: bool | None = None


_local = threading.local()
_install_lock = threading.Lock()


def _guarded_getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    results = _real_getaddrinfo(host, port, *args, **kwargs)
    guard: Guard | None = getattr(_local, "guard", None)
    if guard is None:
        return results
    try:
        _check(results, guard.allowed)
    except AddressRefused as exc:
        guard.refused = guard.refused or str(exc)
        # What the transports raise for a name that does not resolve: no connection is made.
        raise socket.gaierror(socket.EAI_NONAME, "refused by the panel's address policy") from None
    return results


_real_send: Any = None


def _tracked_send(session: Any, request: Any, **kwargs: Any) -> Any:
    guard: Guard | None = getattr(_local, "guard", None)
    try:
        response = _real_send(session, request, **kwargs)
    except BaseException:
        if guard is not None:
            guard.answered = False
        raise
    if guard is not None:
        guard.answered = True
    return response


def _install() -> None:
    global _real_send
    import requests

    with _install_lock:
        if socket.getaddrinfo is not _guarded_getaddrinfo:
            socket.getaddrinfo = _guarded_getaddrinfo
        session: Any = requests.Session
        if session.send is not _tracked_send:
            _real_send = session.send
            session.send = _tracked_send


@contextlib.contextmanager
def guarded(allowed: Iterable[IPNetwork]) -> Iterator[Guard]:
    """Within this block, every name or address this thread looks up to connect to (requests,
    urllib3, smtplib and socket.create_connection all go through `socket.getaddrinfo`) must
    resolve to allowed addresses only; other threads are not affected. It also notes whether the
    last HTTP request (requests.Session.send, which Apprise's HTTP services use, redirects included)
    got an answer."""
    _install()
    outer = getattr(_local, "guard", None)
    guard = Guard(allowed=list(allowed))
    _local.guard = guard
    try:
        yield guard
    finally:
        _local.guard = outer

"""The connections of a front door or the lab router: counted, capped, and cut when a request head
is late (limits.py says the bounds; server.py's `listen()` puts them in front of aiohttp).

aiohttp's server bounds none of this itself: a client that connects and sends half a request head
holds its connection (and a file descriptor) for as long as it likes, so about a thousand of them
took every descriptor of a door under systemd's default limit. Here each connection passes a
`Guard` (an asyncio protocol in front of aiohttp's own RequestHandler) before aiohttp sees it:

- over the total cap or the client address's cap, the connection is answered a canned 503 (OpenAI's
  error shape, written at once, nothing parsed or queued) and closed as soon as the client's
  request arrives (read and dropped, so that the close is no reset that loses the 503), at most
  REFUSE_LINGER_S later; past REFUSING_SHARE of max_connections such refusals at once, it is
  closed with no answer (a flood costs the door at most that many more descriptors);
- a connection whose first request head has not arrived whole within the header timeout is
  answered 408 and closed (the server's middleware marks each request's head as arrived);
- the rest is aiohttp's: keep-alive idle and body bounds are its settings and server.py's.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import Counter
from collections.abc import Callable

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from .limits import ConnectionLimits
from .proxy import error_response

__all__ = ["Connections", "GuardedSite"]

log = logging.getLogger("controlpanel.frontdoor")

REFUSE_LINGER_S = 1.0  # a refused connection waits at most this long for its request before it closes
REFUSING_SHARE = 8  # refusals waiting at once: at most max_connections / 8 (64 of 512)
SAY_EVERY_S = 60.0  # refused connections are logged at most once a minute, with their count
# The listen queue: connections the kernel has made that the door has not yet taken (and admitted
# or refused). At aiohttp's 128, a flood of connects fills it and the kernel drops the next clients'
# handshakes, which they retry 1, 3 and 7 s later: a keyed client's connect waits behind the flood,
# and an attacker's connection is taken only after the first ones were cut. 2048, as uvicorn and
# gunicorn listen (the kernel caps it at net.core.somaxconn, 4096 on recent kernels).
BACKLOG = 2048
# Connections taken from that queue per turn of the event loop. asyncio takes as many as the
# listen queue's length, so at 2048 a flood became 2048 descriptors at once (over systemd's default
# of 1,024: accept fails with EMFILE and asyncio stops accepting for a second), before any was
# refused. A taken connection is admitted or refused, and a refused one closed, within three more
# turns, so a flood holds at most about four turns' worth beyond the cap and the refusals waiting:
# 4 x 64 = 256, under 1,024 with the default cap of 512 and its 64 refusals.
ACCEPT_BATCH = 64


def canned(status: int, reason: str, message: str, *, code: str, retry_after: int | None = None) -> bytes:
    """A whole HTTP/1.1 answer, OpenAI-shaped, that closes the connection: written as is, no parsing."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    body = error_response(status, message, code=code, kind=kind).body
    assert isinstance(body, bytes)
    head = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json; charset=utf-8"]
    head += [f"Content-Length: {len(body)}", "Connection: close"]
    if retry_after is not None:
        head.append(f"Retry-After: {retry_after}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Connections:
    """The open connections of one server, by client address, and the protocol factory that
    admits them (`protocol`, for loop.create_server)."""

    def __init__(self, limits: ConnectionLimits, name: str) -> None:
        self.limits, self.name = limits, name
        self.server: Callable[[], RequestHandler] | None = None  # the runner's, once it is set up
        self.by_peer: Counter[str] = Counter()
        self.open = 0
        self.refusing = 0  # refused connections waiting for their request, to close without a reset
        self.guards: dict[RequestHandler, Guard] = {}
        self.full = canned(
            503, "Service Unavailable", f"The {name} has too many connections open; try again shortly.",
            code="too_many_connections", retry_after=1,
        )  # fmt: skip
        self.peer_full = canned(
            503, "Service Unavailable",
            f"Too many connections from your address (at most {limits.max_connections_per_peer}); "
            "close some or reuse them.",
            code="too_many_connections", retry_after=1,
        )  # fmt: skip
        self.late = canned(
            408, "Request Timeout",
            f"The request's head did not arrive within {limits.header_timeout_s:g} s of connecting.",
            code="request_timeout",
        )  # fmt: skip
        # Since the server started, for its /metrics (metrics.py): connections refused at a cap
        # ("total", "peer") and answered 408 because their head or body was late ("head", "body").
        self.refused: Counter[str] = Counter()
        self.timed_out: Counter[str] = Counter()
        self._unsaid: Counter[str] = Counter()
        self._said_at = 0.0

    def protocol(self) -> Guard:
        return Guard(self)

    def admit(self, peer: str) -> bytes | None:
        """Count a new connection from `peer`, or the answer that refuses it."""
        if self.open >= self.limits.max_connections:
            return self._refuse("total", "the total cap", self.full)
        if self.by_peer[peer] >= self.limits.max_connections_per_peer:
            return self._refuse("peer", f"the cap per address ({peer})", self.peer_full)
        self.open += 1
        self.by_peer[peer] += 1
        return None

    def release(self, peer: str) -> None:
        self.open -= 1
        self.by_peer[peer] -= 1
        if self.by_peer[peer] <= 0:
            del self.by_peer[peer]

    def head_arrived(self, handler: RequestHandler) -> None:
        """A request's head arrived whole on `handler`'s connection (the server's middleware)."""
        guard = self.guards.get(handler)
        if guard is not None:
            guard.head_arrived()

    def _refuse(self, cap: str, why: str, answer: bytes) -> bytes:
        self.refused[cap] += 1
        self._unsaid[why] += 1
        now = time.monotonic()
        if now - self._said_at >= SAY_EVERY_S:
            counts = ", ".join(f"{n} over {what}" for what, n in self._unsaid.items())
            log.warning("%s: refused connections (%s); %d open", self.name, counts, self.open)
            self._unsaid.clear()
            self._said_at = now
        return answer


class Guard(asyncio.Protocol):
    """One connection: admitted or refused by its `Connections`, then passed to aiohttp's own
    protocol, and closed with a 408 when its first request head is late."""

    def __init__(self, connections: Connections) -> None:
        self.connections = connections
        self.inner: RequestHandler | None = None
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.timer: asyncio.TimerHandle | None = None
        self.refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        peername = transport.get_extra_info("peername")
        peer = str(peername[0]) if peername else ""
        self.peer = peer.removeprefix("::ffff:")  # an IPv4 client of a dual-stack bind is itself
        refusal = self.connections.admit(self.peer)
        if refusal is not None:
            self._refuse(transport, refusal)
            return
        self.transport = transport
        assert self.connections.server is not None
        self.inner = self.connections.server()
        self.connections.guards[self.inner] = self
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.connections.limits.header_timeout_s, self._late)
        self.inner.connection_made(transport)

    def _refuse(self, transport: asyncio.Transport, refusal: bytes) -> None:
        """Write `refusal` and half-close; close when the client's request comes (or soon)."""
        if self.connections.refusing >= max(1, self.connections.limits.max_connections // REFUSING_SHARE):
            transport.abort()
            return
        self.refused, self.transport = True, transport
        self.connections.refusing += 1
        transport.write(refusal)
        if transport.can_write_eof():
            transport.write_eof()
        self.timer = asyncio.get_running_loop().call_later(REFUSE_LINGER_S, transport.close)

    def head_arrived(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _late(self) -> None:
        self.timer = None
        if self.transport is not None and not self.transport.is_closing():
            self.connections.timed_out["head"] += 1
            self.transport.write(self.connections.late)
            self.transport.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self.head_arrived()  # stops either timer
        self.transport = None
        if self.refused:
            self.refused = False
            self.connections.refusing -= 1
        inner, self.inner = self.inner, None
        if inner is None:  # refused, or already gone
            return
        self.connections.guards.pop(inner, None)
        self.connections.release(self.peer)
        inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)
        elif self.refused and self.transport is not None:  # its request came: dropped, and closed
            self.transport.close()

    def eof_received(self) -> None:
        if self.inner is not None:
            self.inner.eof_received()

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()


class GuardedSite(web.BaseSite):
    """A TCP site whose connections pass `connections`' guards before its runner's server."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, connections: Connections) -> None:
        super().__init__(runner, backlog=BACKLOG)
        self.host, self.port, self.connections = host, port, connections

    @property
    def name(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        server = await loop.create_server(self.connections.protocol, self.host, self.port, backlog=ACCEPT_BATCH)
        # asyncio listens with the batch it accepts; the kernel's queue is made longer again
        # (listen() on a listening socket only sets its queue's length).
        for listening in server.sockets:
            with socket.fromfd(listening.fileno(), listening.family, listening.type) as again:
                again.listen(self._backlog)
        self._server = server

"""An overall deadline for each request an import makes to the hub.

httpx's timeouts (and so huggingface_hub's `timeout=`, `HF_HUB_ETAG_TIMEOUT`,
`HF_HUB_DOWNLOAD_TIMEOUT`) bound each socket operation, not a request: every byte that arrives
starts the read timeout again, so a mirror that drips one byte every few seconds (in its
headers or its body) keeps a request alive for hours, and httpx has no total timeout.

The bound therefore sits where every byte passes: the network backend of the connection pools
of huggingface_hub's shared client (installed once through its public `set_client_factory`).
Inside `request_deadline(seconds)` each connect, write and read waits at most until the
deadline, and one that starts after it fails at once with a timeout, whatever the server
drips; outside it (host downloads, which have their own cancel) nothing changes. The deadline
lives in a context variable, so concurrent requests in other threads keep their own.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpcore2

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("hub_request_deadline", default=None)
_INSTALL_LOCK = threading.Lock()
_installed = False


def _cap(timeout: float | None) -> float | None:
    """The wait allowed for one socket operation: the caller's, but never past the deadline."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise httpcore2.ReadTimeout("the request's overall deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore2.NetworkStream):
    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _cap(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _cap(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> _Stream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _cap(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore2.NetworkBackend):
    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> _Stream:
        return _Stream(self._inner.connect_tcp(host, port, _cap(timeout), local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> _Stream:
        return _Stream(self._inner.connect_unix_socket(path, _cap(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _with_deadlines(client: Any) -> Any:
    """`client` with every connection pool's network I/O bounded by the current deadline."""
    transports = [client._transport, *client._mounts.values()]
    for transport in transports:
        if transport is None:  # a NO_PROXY entry: requests go through the client's own transport
            continue
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if pool is None or backend is None:
            raise RuntimeError("huggingface_hub's HTTP client has no network backend for a hub deadline to bound")
        if not isinstance(backend, _Backend):
            pool._network_backend = _Backend(backend)
    return client


def install() -> None:
    """Bound huggingface_hub's shared client (once per process; its default settings kept)."""
    global _installed
    if _installed:
        return
    with _INSTALL_LOCK:
        if _installed:
            return
        from huggingface_hub import set_client_factory
        from huggingface_hub.utils._http import default_client_factory

        set_client_factory(lambda: _with_deadlines(default_client_factory()))
        _installed = True


@dataclass
class Deadline:
    seconds: float
    at: float

    @property
    def passed(self) -> bool:
        return time.monotonic() >= self.at


@contextmanager
def request_deadline(seconds: float) -> Iterator[Deadline]:
    """Every hub request made inside ends by `seconds` from now (a timeout error past it)."""
    install()
    deadline = Deadline(seconds, time.monotonic() + seconds)
    token = _DEADLINE.set(deadline.at)
    try:
        yield deadline
    finally:
        _DEADLINE.reset(token)

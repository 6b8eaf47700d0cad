"""HTTP clients for the engines on this host: health, models, metrics, the test chat.

A new `httpx.Client` builds a TLS context and loads the CA bundle into it: about 25 ms of CPU
each time (measured on the test machine), spent on every health probe, metrics scrape and
watchdog check even though these URLs are almost always plain http on this host. The context
here is built once and shared, with the same verification httpx would do by default, so a
client costs ~1 ms. The switch's state report and verification each made one (bench/bench_switch.py).

They never go through a proxy: these URLs are this host's own ports, and an HTTP_PROXY or
http_proxy in the agent's environment (there for the model hub) without a NO_PROXY would send a
loopback health check to the proxy, which cannot reach it: an engine or a front door seen down
while it answers. httpx's `trust_env=False` leaves the proxy variables (and .netrc) unread.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def _tls() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def engine_client(timeout: httpx.Timeout | float) -> httpx.Client:
    """A client for this host's engines and front door (close it, or use it in a `with`); no proxy."""
    return httpx.Client(timeout=timeout, verify=_tls(), trust_env=False)


def engine_get(url: str, *, timeout: float, headers: dict[str, str] | None = None) -> httpx.Response:
    """One GET, as `httpx.get` does it, without building a TLS context or asking a proxy."""
    with engine_client(timeout) as client:
        return client.get(url, headers=headers)

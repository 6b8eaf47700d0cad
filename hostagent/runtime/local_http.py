"""HTTP clients for the engines on this host: health, models, metrics, the test chat.

A new `httpx.Client` builds a TLS context and loads the CA bundle into it: about 25 ms of CPU
each time (measured on the test machine), spent on every health probe, metrics scrape and
watchdog check even though these URLs are almost always plain http on this host. The context
here is built once and shared, with the same verification httpx would do by default, so a
client costs ~1 ms. The switch's state report and verification each made one (bench/bench_switch.py).
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def _tls() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def engine_client(timeout: httpx.Timeout | float) -> httpx.Client:
    """A client for this host's engines (close it, or use it in a `with`)."""
    return httpx.Client(timeout=timeout, verify=_tls())


def engine_get(url: str, *, timeout: float, headers: dict[str, str] | None = None) -> httpx.Response:
    """One GET, as `httpx.get` does it, without building a TLS context."""
    with engine_client(timeout) as client:
        return client.get(url, headers=headers)

"""The front door's Prometheus metrics (names and labels: docs/front-door.md).

`model` is the served model (the revision), `alias` the name the client used (the model's own
name when it used no alias), `key` the inference key's name ("" when the door is open). Labels
come from the routing and key tables only, never from what a client sends, so a client cannot
grow the series without bound. Each front door has its own registry (tests run several);
`Registry` is the lab router's too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

__all__ = ["Metrics", "Registry"]

WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
PHASE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
LOAD_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600)


class ConnectionCounts(Protocol):
    """What the metrics read of a server's connections (connections.py's `Connections`)."""

    @property
    def open(self) -> int: ...
    @property
    def refused(self) -> Mapping[str, int]: ...  # by cap: "total", "peer"
    @property
    def timed_out(self) -> Mapping[str, int]: ...  # by part: "head", "body"


class Registry:
    """A server's own metrics (tests run several in one process) and its `GET /metrics` answer;
    the front door's and the lab router's (labrouter/metrics.py). Their names begin with `prefix`,
    and once the server listens (server.py's `listen()`) they count its connections too."""

    def __init__(self, prefix: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.prefix = prefix
        self.connections: ConnectionCounts | None = None
        self.registry.register(_ConnectionSeries(self))

    def counter(self, name: str, doc: str, *labels: str) -> Counter:
        return Counter(name, doc, labels, registry=self.registry)

    def gauge(self, name: str, doc: str, *labels: str) -> Gauge:
        return Gauge(name, doc, labels, registry=self.registry)

    def histogram(self, name: str, doc: str, buckets: tuple[float, ...], *labels: str) -> Histogram:
        return Histogram(name, doc, labels, buckets=buckets, registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def response(self, more: bytes = b"") -> web.Response:
        """The Prometheus text, as `GET /metrics` answers it; `more` (other families: the front
        door's engines') after its own."""
        return web.Response(body=self.render() + more, headers={"Content-Type": CONTENT_TYPE_LATEST})


class _ConnectionSeries(Collector):
    """A server's connections and what its bounds cut (connections.py), read when scraped."""

    def __init__(self, owner: Registry) -> None:
        self.owner = owner

    def describe(self) -> list[Metric]:
        return []  # the series come once the server listens

    def collect(self) -> Iterator[Metric]:
        connections, prefix = self.owner.connections, self.owner.prefix
        if connections is None:
            return
        yield GaugeMetricFamily(f"{prefix}_connections_open", "Client connections open", value=connections.open)
        yield _counts(
            f"{prefix}_connections_refused",
            "Connections refused at a cap: answered 503 too_many_connections, or closed unanswered",
            "cap", connections.refused, ("total", "peer"),
        )  # fmt: skip
        yield _counts(
            f"{prefix}_connections_timed_out",
            "Connections answered 408 request_timeout and closed: the request's head or body was late",
            "part", connections.timed_out, ("head", "body"),
        )  # fmt: skip


def _counts(name: str, doc: str, label: str, counts: Mapping[str, int], values: tuple[str, ...]) -> Metric:
    """A counter family of `counts`, one sample per value of `label` (0 for those not counted yet)."""
    family = CounterMetricFamily(name, doc, labels=[label])
    for value in values:
        family.add_metric([value], counts.get(value, 0))
    return family


class Metrics(Registry):
    """The front door's."""

    def __init__(self) -> None:
        super().__init__("frontdoor")
        counter, histogram = self.counter, self.histogram

        def gauge(name: str, doc: str) -> Gauge:
            return self.gauge(name, doc, "model")

        self.requests = counter(
            "frontdoor_requests",
            "Requests answered, by served model, the name used, inference key, endpoint and HTTP status",
            *("model", "alias", "key", "endpoint", "code"),
        )
        self.streams_cut = counter(
            "frontdoor_streams_cut",
            "Streams the engine broke off mid-answer: ended with an error event and a closed connection (502)",
            *("model", "alias"),
        )
        self.tokens = counter(
            "frontdoor_tokens", "Tokens the engines counted (their usage), by kind: prompt or completion",
            *("model", "alias", "key", "kind"),
        )  # fmt: skip
        self.queue_depth = gauge("frontdoor_queue_depth", "Requests waiting for their model to load")
        self.queue_wait = histogram(
            "frontdoor_queue_wait_seconds", "Time requests waited for their model (0 when it was loaded)",
            WAIT_BUCKETS, "model", "alias",
        )  # fmt: skip
        self.queue_rejected = counter(
            "frontdoor_queue_rejected",
            "Requests refused by the queue bound: full (429), waited too long (503), or a key's share (429)",
            "model", "reason",
        )  # fmt: skip
        self.in_flight = gauge("frontdoor_requests_in_flight", "Requests being answered by the engine")
        self.loaded = gauge("frontdoor_model_loaded", "1 while the model is loaded and serving")
        self.loads = counter(
            "frontdoor_loads",
            "Loads by result: ok, failed (the engine did not come up), no_room, busy (drain timed out), timeout",
            "model", "result",
        )  # fmt: skip
        self.load_seconds = histogram(
            "frontdoor_load_seconds", "Seconds the loader took: engine start to a passed health gate",
            LOAD_BUCKETS, "model",
        )  # fmt: skip
        self.unloads = counter("frontdoor_unloads", "Unloads by reason: room, idle, removed", "model", "reason")
        self.swap_phase = histogram(
            "frontdoor_swap_phase_seconds",
            "A swap's timeline, phase by phase: turn (the loaded model finishes its own requests), drain, "
            "stop, release (memory shown free), start (engine start to a passed health gate; the command loader's "
            "spawn and health within it), first_token",
            PHASE_BUCKETS, "model", "phase",
        )  # fmt: skip
        # The loaded engines' own /metrics, asked when the door's is scraped (engine_metrics.py).
        self.engine_up = gauge(
            "frontdoor_engine_scrape_up",
            "1 when the loaded model's engine gave its /metrics for this scrape (its series follow), else 0",
        )
        self.engine_scrape_seconds = gauge(
            "frontdoor_engine_scrape_seconds", "Seconds the loaded model's engine took to answer /metrics (or fail)"
        )
        self.engine_scrape_failures = counter(
            "frontdoor_engine_scrape_failures",
            "Engine /metrics left out of a scrape, by reason: off (the engine exports none), timeout, refused, "
            "status (not 200), parse, too_large",
            "model", "reason",
        )  # fmt: skip

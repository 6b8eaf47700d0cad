"""The lab router's Prometheus metrics (names and labels: docs/metrics.md), on the front door's
Registry (hostagent/frontdoor/metrics.py): the same exposition, one registry per router.

`host` is the host whose front door answered ("" when the router answered itself), `alias` the
name the client asked for ("" when no door serves it) and `model` the served model that name is
at the door that answered ("" when none did). Every value comes from the route table, never from
what a client sends. The gauges are read from the router's state when
scraped.
"""

from __future__ import annotations

from collections.abc import Mapping

from hostagent.frontdoor.metrics import Registry
from serving.lab_routes import LabRoutes

__all__ = ["RouterMetrics"]


class RouterMetrics(Registry):
    def __init__(self) -> None:
        super().__init__("router")
        self.requests = self.counter(
            "router_requests", "Inference requests answered, by the host whose door answered, name asked and status",
            *("host", "model", "alias", "code"),
        )  # fmt: skip
        self.streams_cut = self.counter(
            "router_streams_cut",
            "Streams a door broke off mid-answer: ended with an error event and a closed connection (502)",
            *("host", "model", "alias"),
        )  # fmt: skip
        self.failovers = self.counter(
            "router_failovers", "Doors that took no connection (refused, or none within the connect timeout)", "host"
        )
        self.door_down = self.gauge("router_door_down", "1 while the router sends the door nothing", "host")
        self.in_flight = self.gauge("router_requests_in_flight", "Requests a door is answering for the router", "host")
        self.table_age = self.gauge("router_route_table_age_seconds", "Seconds since the route table was last read")
        self.table_read_failures = self.counter(
            "router_route_table_read_failures", "Reads of the route table that failed (the last table was kept)"
        )

    def scraped(self, table: LabRoutes, down: Mapping[str, bool], in_flight: Mapping[str, int], age_s: float) -> None:
        """The gauges as they stand: every door of `table`, whether it is skipped (by door URL;
        or the table says it cannot be used) and what it answers for the router now."""
        self.door_down.clear()
        self.in_flight.clear()
        for door in table.doors:
            self.door_down.labels(door.host).set(1 if down.get(door.url) or not door.usable else 0)
            self.in_flight.labels(door.host).set(in_flight.get(door.url, 0))
        self.table_age.set(age_s)

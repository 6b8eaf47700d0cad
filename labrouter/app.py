"""The lab router's HTTP side (labrouter/__init__.py says what it does).

POST /v1/chat/completions, /v1/completions, /v1/embeddings,   routed by the body's `model` (a form
     /v1/responses, /v1/responses/input_tokens, /v1/rerank,    field on /v1/audio/transcriptions); the
     /v1/audio/transcriptions, /v1/messages,                   door says which engines serve which
     /v1/messages/count_tokens                                 path (Anthropic's errors on its own)
GET  /v1/models                                              the union of the usable doors', as the key may use it
GET  /metrics                                                Prometheus text (labrouter/metrics.py)
GET  /prometheus/doors                                       the doors as Prometheus HTTP service discovery targets
GET  /health                                                 200 once the route table was read, with its age
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from hostagent.frontdoor.apis import BodyError, api_of
from hostagent.frontdoor.keys import NO_KEY_MESSAGE, InferenceKey, KeyTable
from hostagent.frontdoor.proxy import CLIENT_GONE, error_response
from hostagent.frontdoor.server import ConnectionLimits, bearer_only, listen, read_body, read_body_of
from serving.lab_routes import LabRoutes, Route

from .forward import STREAM, Doors
from .metrics import RouterMetrics

__all__ = ["DOWN_FOR_S", "Router", "door_targets"]

log = logging.getLogger("labrouter")

DOWN_FOR_S = 10.0  # a door that refused a connection is skipped this long


@dataclass
class Asked:
    """What one inference request came to, for its count: the name asked (once the table knows
    it) and the door that took the request."""

    alias: str = ""
    route: Route | None = None

    def took(self, route: Route) -> None:
        self.route = route


class Router:
    """`start()` reads the route table and listens, within `limits`; the table is read again every
    `refresh_s` seconds. With a `metrics_token`, GET /metrics needs `Authorization: Bearer <token>`."""

    def __init__(
        self,
        read_routes: Callable[[], Awaitable[LabRoutes]],
        *,
        host: str = "127.0.0.1",
        port: int = 4100,
        refresh_s: float = 5.0,
        limits: ConnectionLimits | None = None,
        metrics_token: str = "",
    ) -> None:
        self.read_routes, self.host, self.port, self.refresh_s = read_routes, host, port, refresh_s
        self.limits, self.metrics_token = limits or ConnectionLimits(), metrics_token
        self.table = LabRoutes()
        self.keys = KeyTable()
        self.read_at: float | None = None
        self.down: dict[str, float] = {}  # door URL -> monotonic time until which it is skipped
        self.started_at = int(time.time())
        self.metrics = RouterMetrics()
        self._began = time.monotonic()
        self._doors: Doors | None = None
        self._runner: web.AppRunner | None = None
        self._follower: asyncio.Task[None] | None = None
        self._said = ""

    # -- life ----------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.refresh()
        self._doors = Doors()
        self._runner, self.port = await listen(
            self.host, self.port, inference=self._inference, not_found=self._not_found,
            gets={
                "/v1/models": self._models, "/metrics": bearer_only(self._metrics, self.metrics_token),
                "/prometheus/doors": bearer_only(self._door_targets, self.metrics_token), "/health": self._health,
            },
            limits=self.limits, name="lab router", metrics=self.metrics,
        )  # fmt: skip
        self._follower = asyncio.get_running_loop().create_task(self._follow())

    async def stop(self) -> None:
        """Stop reading the table and listening; answers in flight finish (aiohttp's grace)."""
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
        if self._runner is not None:
            await self._runner.cleanup()
        if self._doors is not None:
            await self._doors.close()

    async def refresh(self) -> bool:
        """Read the route table once; a failed read keeps the last one (said once while it lasts)."""
        try:
            table = await self.read_routes()
            keys = KeyTable.from_dict(table.keys)
        except Exception as exc:  # noqa: BLE001 - the router serves on with what it has
            self.metrics.table_read_failures.inc()
            message = f"router: the route table could not be read ({exc}); serving the last one"
            if message != self._said:
                log.warning(message)
                self._said = message
            return False
        self.table, self.keys, self.read_at, self._said = table, keys, time.monotonic(), ""
        return True

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)
            await self.refresh()

    # -- routes -----------------------------------------------------------------------------------

    def _authenticate(self, request: web.Request) -> InferenceKey | None | web.Response:
        """The front doors' rule (KeyTable.open: the door mode), then a known key in the headers."""
        if self.keys.open:
            return None
        key = self.keys.find(request.headers)
        if key is None:
            return error_response(401, NO_KEY_MESSAGE, code="invalid_api_key")
        return key

    def _usable(self, routes: list[Route], label: str, key: InferenceKey | None) -> list[Route]:
        now = time.monotonic()
        return [
            r for r in routes if (key is None or key.allows(label, r.model)) and self.down.get(r.door.url, 0.0) <= now
        ]

    async def _inference(self, request: web.Request) -> web.StreamResponse:
        """`_route()`, counted: by the host whose door answered, the name asked and the status."""
        asked = Asked()
        try:
            response = await self._route(request, asked)
        except asyncio.CancelledError:  # the client hung up: answered if its stream's end went out
            self._count(asked, {"ended": 200, "cut": 502}.get(request.get(STREAM, ""), CLIENT_GONE), request)
            raise
        self._count(asked, {"left": CLIENT_GONE, "cut": 502}.get(request.get(STREAM, ""), response.status), request)
        return response

    def _count(self, asked: Asked, status: int, request: web.Request) -> None:
        route = asked.route
        host, model = (route.door.host, route.model) if route is not None else ("", "")
        self.metrics.requests.labels(host, model, asked.alias, str(status)).inc()
        if request.get(STREAM) == "cut":  # the door broke the stream off: 502, as the door counts it
            self.metrics.streams_cut.labels(host, model, asked.alias).inc()

    async def _route(self, request: web.Request, asked: Asked) -> web.StreamResponse:
        key = self._authenticate(request)
        if isinstance(key, web.Response):
            return key
        body = await read_body(request)
        try:
            label: str = read_body_of(api_of(request.path), body, request.headers.get("Content-Type", ""))["model"]
        except BodyError as bad:
            return error_response(400, str(bad), code="invalid_body")
        if self.read_at is None:
            return error_response(
                503, "The lab router has not read its route table yet; try again shortly.", code="starting",
                kind="server_error", retry_after=max(1.0, self.refresh_s),
            )  # fmt: skip
        if not self.table.known(label):
            return error_response(404, f"The model `{label}` does not exist in this lab.", code="model_not_found")
        asked.alias = label
        if key is not None and not any(key.allows(label, r.model) for r in self.table.routes(label, usable=False)):
            return error_response(
                403, f"The key `{key.name}` may not use `{label}`.", code="model_not_allowed", kind="permission_error"
            )
        assert self._doors is not None
        busy = self._doors.in_flight
        routes = sorted(self._usable(self.table.routes(label), label, key), key=lambda r: busy[r.door.url])
        routes.sort(key=lambda r: not r.loaded)  # stable: loaded first, then the least busy
        if not routes:
            skipped = [f"{host}: refused a connection just now" for host in self._recently_down(label)]
            why = "; ".join(self.table.unusable(label) + skipped)
            return error_response(
                503, f"No host that serves `{label}` can take requests now ({why}).", code="no_route",
                kind="server_error", retry_after=DOWN_FOR_S,
            )  # fmt: skip
        return await self._doors.forward(request, routes, body, self._mark_down, asked.took)

    def _recently_down(self, label: str) -> list[str]:
        now = time.monotonic()
        return [r.door.host for r in self.table.routes(label) if self.down.get(r.door.url, 0.0) > now]

    def _mark_down(self, route: Route, why: str) -> None:
        self.down[route.door.url] = time.monotonic() + DOWN_FOR_S
        self.metrics.failovers.labels(route.door.host).inc()
        log.warning(
            "router: %s's front door (%s) took no connection (%s); skipped for %g s",
            route.door.host, route.door.url, why, DOWN_FOR_S,
        )  # fmt: skip

    async def _models(self, request: web.Request) -> web.Response:
        key = self._authenticate(request)
        if isinstance(key, web.Response):
            return key
        data: list[dict[str, Any]] = []
        for label, found in self.table.models().items():
            routes = self._usable(found, label, key)
            if routes:
                hosts = sorted({r.door.host for r in routes})
                data.append(
                    {
                        "id": label,
                        "object": "model",
                        "created": self.started_at,
                        "owned_by": "controlpanel",
                        "controlpanel": {"hosts": hosts, "loaded": any(r.loaded for r in routes)},
                    }
                )
        return web.json_response({"object": "list", "data": data})

    async def _metrics(self, request: web.Request) -> web.Response:
        """As the front door's: no key (scrape it from the lab's network), or the metrics token."""
        now = time.monotonic()
        down = {url: until > now for url, until in self.down.items()}
        busy = self._doors.in_flight if self._doors is not None else {}
        self.metrics.scraped(self.table, down, busy, now - (self.read_at or self._began))
        return self.metrics.response()

    async def _door_targets(self, request: web.Request) -> web.Response:
        """Every door of the route table other machines can reach, as Prometheus' `http_sd_configs`
        reads targets (docs/metrics.md): its HOST:PORT, labelled with its host's name."""
        return web.json_response(door_targets(self.table))

    async def _health(self, request: web.Request) -> web.Response:
        if self.read_at is None:
            return web.json_response({"status": "starting", "reason": self._said or "no route table yet"}, status=503)
        usable = sum(1 for door in self.table.doors if door.usable)
        age = round(time.monotonic() - self.read_at, 3)
        return web.json_response({"status": "ok", "doors": len(self.table.doors), "usable": usable, "table_age_s": age})

    async def _not_found(self, request: web.Request) -> web.Response:
        return error_response(404, f"No route {request.method} {request.path} on the lab router.", code="not_found")


def door_targets(table: LabRoutes) -> list[dict[str, Any]]:
    """[{"targets": ["10.0.0.7:4000"], "labels": {"host": "gpu-box-1"}}, ...] for the doors with a URL."""
    return [{"targets": [urlsplit(door.url).netloc], "labels": {"host": door.host}} for door in table.doors if door.url]

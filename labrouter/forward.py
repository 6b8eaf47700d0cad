"""One request to the lab's front doors: tried at each door in turn until one takes it, the
answer passed back as it comes.

A door "takes" a request once the connection to it is made: a refused or timed-out connect sent
nothing, so the next door that serves the name is tried; anything after that (the door broke off,
answered an error) is the answer, since the request may already be running on an engine. A stream
is written on as the door writes it; when the client hangs up, aiohttp cancels the handler
(handler_cancellation) and closing the door's response here closes its connection, which the door
passes on to the engine. A stream the door breaks off before its end (it died, or its engine did)
ends at the client as a failure, as the door ends one (hostagent/frontdoor/proxy.py cut_stream):
an error event in the API's format (apis.cut_event), the door's own when it wrote one, then the
connection closed with the body unfinished.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Sequence

import aiohttp
from aiohttp import web

from hostagent.frontdoor.apis import CUT_TAIL, ends_with_cut
from hostagent.frontdoor.proxy import PooledClient, chunks, cut_stream, error_response
from hostagent.frontdoor.usage import LONGEST_END, ends_stream
from serving.lab_routes import Route

__all__ = ["HOST_HEADER", "STREAM", "Doors"]

log = logging.getLogger("labrouter")

HOST_HEADER = "X-Controlpanel-Host"  # which host's front door answered
# Request key: "ended" once a stream's [DONE] went out, "left" if the client left first, "cut" if
# the door broke it off before its end.
STREAM = "controlpanel.stream"
PASSED_BACK = ("Content-Type", "Cache-Control", "Retry-After", "X-Queue-Wait-Ms")
PASSED_ON = ("Content-Type", "Authorization", "X-Api-Key", "Accept")  # the door checks the key again
CONNECT_TIMEOUT_S = 3.0  # a door on the lab's network connects in milliseconds
DOWN_RETRY_S = 1  # Retry-After when no door took a request


class Doors(PooledClient):
    """The router's HTTP client to the front doors."""

    def __init__(self) -> None:
        super().__init__(keepalive_s=15.0, connect_timeout_s=CONNECT_TIMEOUT_S)  # the doors keep 30 s
        self.in_flight: Counter[str] = Counter()  # door URL -> requests it is answering for us

    async def forward(
        self,
        request: web.Request,
        routes: Sequence[Route],
        body: bytes,
        down: Callable[[Route, str], None],
        took: Callable[[Route], None],
    ) -> web.StreamResponse:
        """Send `body` to the first of `routes` that takes it; `down(route, why)` for each door
        that did not, `took(route)` for the one that did (its answer is the answer). 503 when
        none did."""
        headers = {name: request.headers[name] for name in PASSED_ON if name in request.headers}
        forwarded = request.headers.get("X-Forwarded-For")
        headers["X-Forwarded-For"] = f"{forwarded}, {request.remote}" if forwarded else str(request.remote)
        tried = []
        for route in routes:
            self.in_flight[route.door.url] += 1
            try:
                try:
                    upstream = await self.post(route.door.url + request.path, body, headers)
                except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
                    down(route, str(getattr(exc, "os_error", None) or exc) or type(exc).__name__)
                    tried.append(route.door.host)
                    continue
                except (aiohttp.ClientError, TimeoutError) as exc:
                    took(route)  # connected, then broke off
                    log.warning("router: %s's front door did not answer: %s", route.door.host, exc)
                    return error_response(
                        502, f"{route.door.host}'s front door did not answer.", code="upstream_unavailable",
                        kind="server_error",
                    )  # fmt: skip
                took(route)
                try:
                    return await self._answer(request, upstream, route)
                finally:
                    upstream.close()  # a no-op for an answer read to its end; else the door sees us hang up
            finally:
                self.in_flight[route.door.url] -= 1
        return error_response(
            503, f"No front door that serves this model took the request (tried {', '.join(tried)}).",
            code="no_route", kind="server_error", retry_after=DOWN_RETRY_S,
        )  # fmt: skip

    async def _answer(self, request: web.Request, upstream: aiohttp.ClientResponse, route: Route) -> web.StreamResponse:
        headers = {name: upstream.headers[name] for name in PASSED_BACK if name in upstream.headers}
        headers[HOST_HEADER] = route.door.host
        if upstream.content_type != "text/event-stream":
            return web.Response(body=await upstream.read(), status=upstream.status, headers=headers)
        response = web.StreamResponse(status=upstream.status, headers=headers)
        await response.prepare(request)
        tail = b""  # the end of what was written: the end event may come split over two reads, a door's cut event too
        keep = max(CUT_TAIL, LONGEST_END)
        try:
            async for chunk in chunks(upstream):
                carries_end = ends_stream(tail[-LONGEST_END:] + chunk)
                if carries_end:  # a hang-up while it drains, or after, was answered
                    request[STREAM] = "ended"
                try:
                    await response.write(chunk)
                except ConnectionResetError:
                    if carries_end:  # refused before anything was handed over
                        request[STREAM] = "left"
                    raise
                tail = chunk[-keep:] if len(chunk) >= keep else (tail + chunk)[-keep:]
                if ends_with_cut(tail):  # the door's error event went out: a client that leaves on it saw the cut
                    request[STREAM] = "cut"
            await response.write_eof()
        except ConnectionResetError:
            request.setdefault(STREAM, "left")  # gone before the end; closing the door's response tells the door
        except aiohttp.ClientError as exc:
            if request.get(STREAM) == "ended":  # after [DONE]: the client has the whole answer
                with contextlib.suppress(ConnectionResetError):
                    await response.write_eof()
                return response
            log.warning("router: %s's front door broke off a stream mid-answer: %s", route.door.host, exc)
            request[STREAM] = "cut"
            message = f"{route.door.host}'s front door broke off this answer before its end: it is incomplete."
            if ends_with_cut(tail):  # the door said why: the client reads its event, and no second one
                if request.transport is not None:
                    request.transport.close()
            else:
                await cut_stream(request, response, message, path=request.path, tail=tail)
        return response

"""One request to an engine, on a lease: the body rewritten for the engine, the answer passed back
as it comes, usage read on the way.

Streams are passed on event by event as the engine writes them (nothing waits for the whole
answer); `StreamResponse.write()` waits while the client's socket is full, so the front door stops
reading the engine, whose own writes then wait (back-pressure end to end). A client that goes away
cancels the handler (aiohttp's handler_cancellation), and the engine's connection is closed, which
makes llama.cpp and vLLM stop generating for it.

A stream the engine breaks off before its end (it died, or was stopped) is not ended as a whole
answer would be: the client gets an error event in the stream, in its API's format (`cut_stream`,
apis.cut_event), then the connection closes without HTTP's end of the body, so every client sees
a failure, never a short 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from .apis import CUT_TAIL, Form, api_of, cut_event, encode_body
from .scheduler import Lease
from .usage import UsageStream, ends_stream

__all__ = [
    "CLIENT_GONE", "Answer", "EngineGone", "PooledClient", "Upstream", "chunks", "cut_stream", "error_response",
]  # fmt: skip

log = logging.getLogger("controlpanel.frontdoor")

QUEUE_WAIT_HEADER = "X-Queue-Wait-Ms"
CLIENT_GONE = 499  # the code nginx logs for a request its client closed


def error_response(
    status: int,
    message: str,
    *,
    code: str,
    kind: str = "invalid_request_error",
    retry_after: float | None = None,
    param: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> web.Response:
    """An error shaped as OpenAI's, which every OpenAI client knows how to show; `details` are
    more fields of the error object (clients that do not know them ignore them)."""
    body = {"error": {**(details or {}), "message": message, "type": kind, "param": param, "code": code}}
    headers = {"Retry-After": str(int(retry_after))} if retry_after is not None else None
    return web.json_response(body, status=status, headers=headers)


async def chunks(upstream: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The upstream's body as it arrives. When its connection breaks (ClientPayloadError), what
    it wrote just before the break comes first: aiohttp's reads raise as soon as the break is
    known and drop what is still buffered (StreamReader.readany), so an engine's last events, or a
    door's error event, that arrived with the close would be lost."""
    try:
        async for chunk in upstream.content.iter_any():
            yield chunk
    except aiohttp.ClientError:
        rest = upstream.content._read_nowait(-1)  # the buffer as it stands; the public reads raise
        if rest:
            yield rest
        raise


async def cut_stream(
    request: web.Request, response: web.StreamResponse, message: str, *, path: str, tail: bytes
) -> None:
    """End a stream of API `path` that cannot be finished as a failure the client sees: the
    error event in that API's format (apis.cut_event; after
    a blank line when `tail`, the last bytes written, ends inside an event), then the connection
    closed without chunked encoding's last, empty chunk. curl exits 18 ("transfer closed with
    outstanding read data remaining") and httpx raises RemoteProtocolError even for a client that
    reads no events. close() sends what is buffered first; aiohttp's own end of the response then
    meets a closed transport and writes nothing."""
    boundary = not tail or tail.endswith((b"\n\n", b"\r\n\r\n"))
    with contextlib.suppress(ConnectionResetError):
        await response.write((b"" if boundary else b"\n\n") + cut_event(path, message, tail=tail))
    if request.transport is not None:
        request.transport.close()


# llama-server's answer on every path from the moment it listens until its model is loaded: 503,
# {"error": {"message": "Loading model", ...}} (tools/server/server-http.cpp middleware_server_state).
LOADING = b'"Loading model"'


class EngineGone(Exception):
    """The engine refused the connection (its process is gone), or said it is loading its model:
    nothing was served; the request may be asked again once it is loaded."""


@dataclass
class Answer:
    """What the engine did with a request, for the usage ledger and the metrics."""

    status: int
    usage: dict[str, Any] | None = None
    ok: bool = False
    cut: bool = False  # a stream the engine broke off mid-answer (status 502)


class PooledClient:
    """An HTTP client that keeps connections open (`keepalive_s` idle, at most) and makes new ones
    within `connect_timeout_s`: the front door's to its engines, the lab router's to the doors.
    Beside its pool it has a session that never pools (force_close), for `post`'s retry."""

    def __init__(self, *, keepalive_s: float, connect_timeout_s: float) -> None:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s)
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=keepalive_s), timeout=timeout
        )
        self.fresh = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True), timeout=timeout)

    async def close(self) -> None:
        await self.session.close()
        await self.fresh.close()

    async def post(self, url: str, data: bytes, headers: Mapping[str, str]) -> aiohttp.ClientResponse:
        """POST on a pooled connection, once more on a fresh one when the pooled one was found
        closed. ClientConnectorError: refused, nothing sent.

        The retry goes out on a new connection (`fresh`), never on another pooled one: the pool's
        next idle connection may be as stale as the first (several closed by the engine at once),
        and the request would fail with 502 while the engine served."""
        try:
            return await self.session.post(url, data=data, headers=headers)
        except aiohttp.ClientConnectorError:
            raise  # refused: no connection was made (the caller knows what that means)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            # A pooled connection closed or reset as it was reused (the server closed it idle, or
            # died): nothing reached it. Once more, on a fresh connection: a dead server refuses it.
            return await self.fresh.post(url, data=data, headers=headers)


class Upstream(PooledClient):
    """The front door's HTTP client to the engines of this host."""

    def __init__(self) -> None:
        # Idle connections close before llama.cpp's own keep-alive (5 s) would close them under us.
        super().__init__(keepalive_s=2.0, connect_timeout_s=10.0)

    async def forward(
        self,
        request: web.Request,
        lease: Lease,
        payload: dict[str, Any] | Form,
        endpoint: str,
        done: Callable[[Answer], None],
        *,
        gone_ok: bool = False,
    ) -> web.StreamResponse:
        """Send `payload` to the lease's engine and answer the client; `done` gets the outcome
        once, whatever happens (a client gone, an engine gone). With `gone_ok`, an engine that refuses
        the connection or says it is loading (LOADING: the watchdog starts the pinned engine again)
        raises EngineGone instead (`done` is not called): the caller loads it again (a pinned engine:
        waits for its health) and retries. Any other 503 (a full queue) is the client's answer."""
        model = lease.model
        api = api_of(endpoint)
        strip = False
        # A chat or completions stream is asked for its usage chunk (Responses and Messages streams
        # carry their usage without one: apis.py).
        if api is not None and api.usage_option and isinstance(payload, dict) and payload.get("stream") is True:
            options = payload.get("stream_options")
            options = options if isinstance(options, dict) else {}
            if not options.get("include_usage"):
                payload["stream_options"] = {**options, "include_usage": True}
                strip = True
        payload["model"] = model.served_name
        data, content_type = encode_body(payload)
        headers = {"Content-Type": content_type}
        if model.api_key:
            headers["Authorization"] = f"Bearer {model.api_key}"
        answer, report = Answer(status=502), True
        try:
            try:
                upstream = await self.post(model.url(endpoint), data, headers)
            except (aiohttp.ClientError, TimeoutError) as exc:
                if gone_ok and isinstance(exc, aiohttp.ClientConnectorError):
                    report = False
                    raise EngineGone(str(exc)) from exc
                log.warning("front door: %s did not answer: %s", model.name, exc)
                return error_response(
                    502, f"The engine serving `{model.name}` did not answer.", code="upstream_unavailable",
                    kind="server_error",
                )  # fmt: skip
            try:
                if gone_ok and upstream.status == 503 and LOADING in await upstream.read():
                    report = False  # loading (a watchdog's restart): as if it refused the connection
                    raise EngineGone(f"{model.name} is loading its model")
                if upstream.status in (401, 403):
                    answer.status = 502
                    log.error("front door: %s refused the front door's engine key (%s)", model.name, upstream.status)
                    return error_response(
                        502, f"The engine serving `{model.name}` refused the front door.", code="upstream_refused",
                        kind="server_error",
                    )  # fmt: skip
                wait_ms = {QUEUE_WAIT_HEADER: str(round(lease.waited_s * 1000))}
                # By what the engine answers, not what the door asked: a stream is metered as one
                # whatever in the body made the engine stream.
                if upstream.status == 200 and upstream.content_type == "text/event-stream":
                    return await self._pass_stream(
                        request, upstream, UsageStream(strip=strip), answer, wait_ms, model.name, lease.answering,
                        endpoint,
                    )  # fmt: skip
                body = await upstream.read()
                lease.answering()
                answer.status = upstream.status
                answer.ok = upstream.status < 400
                answer.usage = _usage_of(body) if answer.ok else None
                return web.Response(
                    body=body, status=upstream.status, content_type=upstream.content_type, headers=wait_ms
                )
            finally:
                upstream.close()  # a no-op for an answer read to its end; else the engine sees us hang up
        except asyncio.CancelledError:
            if not answer.ok:  # a client that hangs up after the whole answer was written got it
                answer.status = CLIENT_GONE
            raise
        finally:
            if report:
                done(answer)

    async def _pass_stream(
        self,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        reader: UsageStream,
        answer: Answer,
        headers: dict[str, str],
        name: str,
        first: Callable[[], None],
        endpoint: str,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **headers}
        )
        answer.status = CLIENT_GONE
        tail = b""  # the end of what was written (the cut's event goes after a whole event)
        try:
            await response.prepare(request)
            async for chunk in chunks(upstream):
                first()
                out = reader.feed(chunk)
                await _deliver(response, out, reader, answer)
                tail = (tail + out)[-CUT_TAIL:] if out else tail
            answer.status = 200  # the engine finished; what is left is ours to deliver
            await _deliver(response, reader.close(), reader, answer)
            # Everything is written: a client that hangs up now was answered, whatever the end
            # of the response meets.
            answer.ok = True
            await response.write_eof()
        except ConnectionResetError:
            if not answer.ok:
                answer.status = CLIENT_GONE
        except aiohttp.ClientError as exc:
            if answer.ok:  # after [DONE]: the client has the whole answer
                with contextlib.suppress(ConnectionResetError):
                    await response.write_eof()
            else:
                # The engine broke off mid-answer (it died, or was stopped): a failure, never a clean end.
                log.warning("front door: %s broke off a stream mid-answer: %s", name, exc)
                answer.status, answer.cut = 502, True
                message = f"The engine serving `{name}` broke off this answer before its end: it is incomplete."
                await cut_stream(request, response, message, path=endpoint, tail=tail)
        finally:
            # The engine's usage, or the text deltas counted when none came (a client gone before
            # llama.cpp's separate usage event, an engine that sends none): never zero for a stream
            # that carried text.
            answer.usage = reader.booked()
        return response


async def _deliver(response: web.StreamResponse, out: bytes, reader: UsageStream, answer: Answer) -> None:
    """Write `out` to the client. The write that carries the stream's end ([DONE]) makes the
    answer whole: most clients hang up the moment they read it, which can cancel the handler
    while the write drains or before the engine's own end of stream is read; that client was
    answered (200), not gone. Refused before anything was handed over, it was not."""
    if not out:
        return
    if not ends_stream(out):
        await response.write(out)
        return
    answer.status, answer.ok = 200, True
    try:
        await response.write(out)
    except ConnectionResetError:
        answer.status, answer.ok = CLIENT_GONE, False
        raise


def _usage_of(body: bytes) -> dict[str, Any] | None:
    try:
        usage = json.loads(body).get("usage")
    except (ValueError, AttributeError):
        return None
    return usage if isinstance(usage, dict) else None

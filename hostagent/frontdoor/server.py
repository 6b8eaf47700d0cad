"""What the front door and the lab router (labrouter/) share as servers: the OpenAI and
Anthropic routes (apis.py), each answering errors in its own API's shape, the body bound, the
connection bounds, reading and parsing a body, and one function that listens.

Both are aiohttp with handler_cancellation: a client that hangs up cancels its handler at once,
which closes the request behind it (the engine's at the door, the door's at the router), even
while the engine is still thinking about the first token. What aiohttp itself refuses (a body over
MAX_BODY, a malformed request) is answered in OpenAI's error shape too, as every answer of ours is;
on an Anthropic path (/v1/messages...) every error, ours or an engine's, in Anthropic's.

No stranger can stall either (limits.py, connections.py): connections are capped in all and per
client address, a request head must arrive within the header timeout, a body within the body
timeout (`read_body()`), an idle keep-alive connection closes after the idle timeout. A body
nested deeper than MAX_JSON_DEPTH is refused as not JSON (`parse_json()`), never a RecursionError.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from .apis import ANTHROPIC, APIS, Api, BodyError, Form, anthropic_error, api_of
from .connections import Connections, GuardedSite
from .limits import ConnectionLimits
from .metrics import Registry
from .proxy import error_response

__all__ = [
    "INFERENCE",
    "MAX_BODY",
    "MAX_JSON_DEPTH",
    "ConnectionLimits",
    "Handler",
    "bearer_only",
    "listen",
    "parse_json",
    "read_body",
    "read_body_of",
]

INFERENCE = tuple(APIS)  # apis.py: OpenAI's and Anthropic's paths
MAX_BODY = 64 << 20  # a long prompt, or images as data URLs
# Lists and objects inside each other: an OpenAI body nests about 6 deep (messages, content parts,
# image_url), a tool's JSON schema a few more; Python's json gives up near 1,000 (RecursionError).
MAX_JSON_DEPTH = 64
LINGER_S = 10.0  # aiohttp's default: a body the handler left unread is read and dropped this long
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_LIMITS = web.AppKey("connection_limits", ConnectionLimits)
_CONNECTIONS = web.AppKey("connections", Connections)


async def listen(
    host: str,
    port: int,
    *,
    inference: Handler,
    gets: Mapping[str, Handler],
    not_found: Handler,
    limits: ConnectionLimits | None = None,
    name: str = "front door",
    metrics: Registry | None = None,
) -> tuple[web.AppRunner, int]:
    """Listen on `host`:`port`: POST INFERENCE to `inference`, GET each of `gets`, anything else
    to `not_found`, within `limits`, counting its connections in `metrics`. Returns the runner,
    whose `cleanup()` stops listening and lets the answers in flight finish, and the port bound
    (the one chosen when `port` is 0)."""
    limits = limits or ConnectionLimits()
    app = web.Application(client_max_size=MAX_BODY, middlewares=[_head_arrived, _api_errors])
    app[_LIMITS] = limits
    app[_CONNECTIONS] = connections = Connections(limits, name)
    if metrics is not None:
        metrics.connections = connections
    for path in INFERENCE:
        app.router.add_post(path, inference)
    for path, handler in gets.items():
        app.router.add_get(path, handler)
    app.router.add_route("*", "/{tail:.*}", not_found)
    runner = web.AppRunner(
        app, handler_cancellation=True, access_log=None, keepalive_timeout=limits.idle_timeout_s,
        lingering_time=min(LINGER_S, limits.body_timeout_s),
    )  # fmt: skip
    await runner.setup()
    assert runner.server is not None
    connections.server = runner.server
    try:
        await GuardedSite(runner, host, port, connections).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])


async def read_body(request: web.Request) -> bytes:
    """The request's body, whole within the server's body timeout (raises 408 when it is late, and
    the connection closes); over MAX_BODY, 413."""
    timeout = request.app[_LIMITS].body_timeout_s
    try:
        async with asyncio.timeout(timeout):
            return await request.read()
    except TimeoutError:
        request.app[_CONNECTIONS].timed_out["body"] += 1
        raise web.HTTPRequestTimeout(text=f"The request's body did not arrive within {timeout:g} s.") from None


def parse_json(body: bytes | str) -> Any:
    """`body` as JSON; ValueError when it is none, or nests lists and objects deeper than
    MAX_JSON_DEPTH (so that nothing after it, such as the door writing it on to an engine, meets
    Python's recursion limit)."""
    try:
        value = json.loads(body)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    opened = body.count(b"[") + body.count(b"{") if isinstance(body, bytes) else body.count("[") + body.count("{")
    if opened > MAX_JSON_DEPTH and _deeper_than(value, MAX_JSON_DEPTH):
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def read_body_of(api: Api | None, body: bytes, content_type: str) -> dict[str, Any] | Form:
    """The body of a request to `api`, with a `model` string; BodyError when it has none."""
    if api is not None and api.multipart:
        form = Form(body, content_type)
        if not isinstance(form.get("model"), str):
            raise BodyError("The form must have a `model` field.")
        return form
    try:
        payload = parse_json(body)
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or not isinstance(payload.get("model"), str):
        raise BodyError("The body must be a JSON object with a `model` string.")
    return payload


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether lists and objects nest more than `limit` deep in `value` (no recursion)."""
    if not isinstance(value, (dict, list)):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def bearer_only(handler: Handler, token: str) -> Handler:
    """`handler` for clients that send `Authorization: Bearer <token>` (401 for the others); with
    no token, `handler` itself (anyone)."""
    if not token:
        return handler
    expected = hashlib.sha256(f"Bearer {token}".encode()).digest()

    async def guarded(request: web.Request) -> web.StreamResponse:
        given = request.headers.get("Authorization", "").encode(errors="replace")
        if not hmac.compare_digest(hashlib.sha256(given).digest(), expected):
            return error_response(401, "This needs its token: Authorization: Bearer <token>.", code="invalid_token")
        return await handler(request)

    return guarded


@web.middleware
async def _head_arrived(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The request's head is in: its connection's header timeout stops (connections.py)."""
    request.app[_CONNECTIONS].head_arrived(request.protocol)
    return await handler(request)


@web.middleware
async def _api_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors in the shape of the request's API: OpenAI's (`_openai_errors`), or on an Anthropic
    path Anthropic's, which its SDK and Claude Code read (apis.anthropic_error)."""
    answer = await _openai_errors(request, handler)
    api = api_of(request.path)
    if api is None or api.family != ANTHROPIC or answer.status < 400 or not isinstance(answer, web.Response):
        return answer
    body = answer.body
    reshaped = anthropic_error(answer.status, body) if isinstance(body, bytes) else None
    if reshaped is None:
        return answer
    shaped = web.Response(body=reshaped, status=answer.status, content_type="application/json")
    for name, value in answer.headers.items():
        if name.lower() not in ("content-type", "content-length"):
            shaped.headers.add(name, value)
    if answer.keep_alive is False:
        shaped.force_close()
    return shaped


async def _openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own refusals (HTTPException: 413 for a body over MAX_BODY, 400 for one it cannot
    read) and ours (408 for a late body) as OpenAI-shaped errors, which a client library shows
    instead of failing to parse."""
    try:
        return await handler(request)
    except web.HTTPException as refused:
        if refused.status < 400:
            raise
        if refused.status == 413:
            message, code = f"{refused.reason}: the body may be at most {MAX_BODY >> 20} MiB.", "body_too_large"
        elif refused.status == 408:  # read_body(): the rest of the body is not waited for
            message, code = refused.text or "", "request_timeout"
        else:
            message, code = f"{refused.reason}.", "invalid_request"
        answer = error_response(refused.status, message, code=code)
        if refused.status == 408:
            answer.force_close()
        return answer

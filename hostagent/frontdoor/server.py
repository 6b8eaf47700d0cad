"""What the front door and the lab router (controlpanel/router/) share as servers: the OpenAI
routes, the body bound, and one function that listens.

Both are aiohttp with handler_cancellation: a client that hangs up cancels its handler at once,
which closes the request behind it (the engine's at the door, the door's at the router), even
while the engine is still thinking about the first token. What aiohttp itself refuses (a body over
MAX_BODY, a malformed request) is answered in OpenAI's error shape too, as every answer of ours is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from .proxy import error_response

__all__ = ["INFERENCE", "MAX_BODY", "Handler", "listen"]

INFERENCE = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
MAX_BODY = 64 << 20  # a long prompt, or images as data URLs
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def listen(
    host: str, port: int, *, inference: Handler, gets: Mapping[str, Handler], not_found: Handler
) -> tuple[web.AppRunner, int]:
    """Listen on `host`:`port`: POST INFERENCE to `inference`, GET each of `gets`, anything else
    to `not_found`. Returns the runner, whose `cleanup()` stops listening and lets the answers in
    flight finish, and the port bound (the one chosen when `port` is 0)."""
    app = web.Application(client_max_size=MAX_BODY, middlewares=[_openai_errors])
    for path in INFERENCE:
        app.router.add_post(path, inference)
    for path, handler in gets.items():
        app.router.add_get(path, handler)
    app.router.add_route("*", "/{tail:.*}", not_found)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])


@web.middleware
async def _openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """aiohttp's own refusals (HTTPException: 413 for a body over MAX_BODY, 400 for one it cannot
    read) as OpenAI-shaped errors, which a client library shows instead of failing to parse."""
    try:
        return await handler(request)
    except web.HTTPException as refused:
        if refused.status < 400:
            raise
        message = f"{refused.reason}: the body may be at most {MAX_BODY >> 20} MiB." if refused.status == 413 else ""
        code = "body_too_large" if refused.status == 413 else "invalid_request"
        return error_response(refused.status, message or f"{refused.reason}.", code=code)

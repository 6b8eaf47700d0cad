"""What the front door and the lab router (controlpanel/router/) share as servers: the OpenAI
routes, the body bound, and one function that listens.

Both are aiohttp with handler_cancellation: a client that hangs up cancels its handler at once,
which closes the request behind it (the engine's at the door, the door's at the router), even
while the engine is still thinking about the first token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

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
    app = web.Application(client_max_size=MAX_BODY)
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

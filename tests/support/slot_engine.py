"""A stand-in engine for front door tests that need an engine's timing rather than its words: a
real process, started by the front door's ProcessLoader as llama-server is, that replays how
llama-server schedules and starts:

- `--slots N` (llama-server's `-np`): at most N requests generate at once; the rest wait in the
  engine's own queue, first come first served. This is why one client's many streams hold up
  everyone else's requests behind them.
- `--token-s T`: each token takes T seconds.
- `--ready-after S`: it listens at once, but GET /health answers 503 "Loading model" for S
  seconds (llama-server's answer while it reads the weights), then 200.
- `--die-after N`: the process dies (exits at once, as a crashed or killed engine does) after
  writing the Nth token of a stream, mid-answer: its connections close with the body unfinished.

POST /v1/chat/completions answers as llama-server's OpenAI API does: a chat completion with its
usage, or with `"stream": true` one chunk per token, a last chunk with the finish reason, the
usage in a chunk of its own when `stream_options.include_usage` asks, then `data: [DONE]`.
POST /v1/messages and /v1/responses with `"stream": true` stream as llama-server's Anthropic
Messages and OpenAI Responses APIs do (one text delta per token, `message_stop` /
`response.completed` at the end), for tests of those APIs' streams (`--die-after` as for chat).

    python tests/support/slot_engine.py --port 8123 --slots 4 --token-s 0.05 --ready-after 0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

HERE = Path(__file__).resolve()


def command(
    port: int, *, slots: int = 4, token_s: float = 0.05, ready_after: float = 0.0, die_after: int = 0
) -> tuple[str, ...]:
    """The argv that starts one, for a ProcessLoader Command."""
    return (
        sys.executable, str(HERE), "--port", str(port), "--slots", str(slots),
        "--token-s", str(token_s), "--ready-after", str(ready_after), "--die-after", str(die_after),
    )  # fmt: skip


def _event(data: dict[str, Any] | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def _named(data: dict[str, Any]) -> bytes:
    """An event named by its `type`, as the Messages and Responses APIs write them."""
    return f"event: {data['type']}\n".encode() + _event(data)


def _messages(model: str, tokens: int) -> tuple[list[bytes], Callable[[int], bytes], list[bytes]]:
    """Anthropic Messages' stream: the events before the text, one per token, those after."""
    message: dict[str, Any] = {"id": "msg_slot", "type": "message", "role": "assistant", "model": model, "content": [],
               "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 5, "output_tokens": 0}}  # fmt: skip
    before = [
        _named({"type": "message_start", "message": message}),
        _named({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ]
    after = [
        _named({"type": "content_block_stop", "index": 0}),
        _named(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
                "usage": {"output_tokens": tokens},
            }
        ),  # fmt: skip
        _named({"type": "message_stop"}),
    ]
    return before, lambda _: _named({"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": "x"}}), after  # fmt: skip


def _responses(model: str, tokens: int) -> tuple[list[bytes], Callable[[int], bytes], list[bytes]]:
    """OpenAI Responses' stream, each event numbered (`sequence_number`)."""
    response: dict[str, Any] = {"id": "resp_slot", "object": "response", "created_at": int(time.time()),
                                "model": model, "status": "in_progress", "output": []}  # fmt: skip
    done = {**response, "status": "completed",
            "usage": {"input_tokens": 5, "output_tokens": tokens, "total_tokens": 5 + tokens}}  # fmt: skip
    before = [_named({"type": "response.created", "sequence_number": 0, "response": response})]
    after = [_named({"type": "response.completed", "sequence_number": tokens + 1, "response": done})]

    def delta(number: int) -> bytes:
        return _named({"type": "response.output_text.delta", "sequence_number": number, "item_id": "msg_slot",
                       "output_index": 0, "content_index": 0, "delta": "x", "logprobs": []})  # fmt: skip

    return before, delta, after


def app(slots: int, token_s: float, ready_after: float, die_after: int = 0) -> web.Application:
    running = asyncio.Semaphore(slots)  # FIFO: waiting requests get slots in the order they came
    ready_at = time.monotonic() + ready_after

    async def health(request: web.Request) -> web.Response:
        if time.monotonic() < ready_at:
            return web.json_response({"error": {"code": 503, "message": "Loading model"}}, status=503)
        return web.json_response({"status": "ok"})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        tokens = int(body.get("max_tokens") or 16)
        model = str(body.get("model", ""))
        created = int(time.time())
        usage = {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens}
        base = {"id": "chatcmpl-slot", "created": created, "model": model}
        async with running:
            if body.get("stream") is not True:
                await asyncio.sleep(token_s * tokens)
                message = {"role": "assistant", "content": "x" * tokens}
                choice = {"index": 0, "message": message, "finish_reason": "length"}
                return web.json_response({**base, "object": "chat.completion", "choices": [choice], "usage": usage})
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            chunk = {**base, "object": "chat.completion.chunk"}
            for written in range(1, tokens + 1):
                await asyncio.sleep(token_s)
                await response.write(_event({**chunk, "choices": [{"index": 0, "delta": {"content": "x"}}]}))
                if written == die_after:
                    await asyncio.sleep(0.05)  # the token reaches the client before the end
                    os._exit(1)
            end = {"index": 0, "delta": {}, "finish_reason": "length"}
            await response.write(_event({**chunk, "choices": [end]}))
            if (body.get("stream_options") or {}).get("include_usage"):
                await response.write(_event({**chunk, "choices": [], "usage": usage}))
            await response.write(_event("[DONE]"))
            await response.write_eof()
            return response

    async def other_api(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        tokens = int(body.get("max_tokens") or body.get("max_output_tokens") or 16)
        shape = _messages if request.path == "/v1/messages" else _responses
        before, delta, after = shape(str(body.get("model", "")), tokens)
        if body.get("stream") is not True:
            return web.json_response({"error": {"message": "only streams here"}}, status=400)
        async with running:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            await response.write(b"".join(before))
            for written in range(1, tokens + 1):
                await asyncio.sleep(token_s)
                await response.write(delta(written))
                if written == die_after:
                    await asyncio.sleep(0.05)  # the token reaches the client before the end
                    os._exit(1)
            await response.write(b"".join(after))
            await response.write_eof()
            return response

    application = web.Application()
    application.router.add_get("/health", health)
    application.router.add_post("/v1/chat/completions", chat)
    application.router.add_post("/v1/messages", other_api)
    application.router.add_post("/v1/responses", other_api)
    return application


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--token-s", type=float, default=0.05)
    parser.add_argument("--ready-after", type=float, default=0.0)
    parser.add_argument("--die-after", type=int, default=0)
    args = parser.parse_args()
    web.run_app(
        app(args.slots, args.token_s, args.ready_after, args.die_after), host="127.0.0.1", port=args.port, print=None,
        handle_signals=True,
    )  # fmt: skip


if __name__ == "__main__":
    main()

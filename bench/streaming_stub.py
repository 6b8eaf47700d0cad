"""A minimal, fast OpenAI-compatible streaming server for measuring the load generator's own
overhead. Loopback only; not an engine. One token per word, one token per chunk.

    python bench/streaming_stub.py --port 8999 [--token-delay-ms 0]

Endpoints: POST /v1/chat/completions (SSE with a final usage chunk, or JSON), POST /tokenize,
GET /health, GET /props, GET /metrics. HTTP/1.1 keep-alive with chunked encoding.
"""

from __future__ import annotations

import argparse
import asyncio
import json

STATE = {"requests": 0, "tokens": 0}


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _respond(writer: asyncio.StreamWriter, status: str, body: bytes, ctype: str) -> None:
    head = f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n"
    writer.write(head.encode() + body)
    await writer.drain()


async def _chat(writer: asyncio.StreamWriter, req: dict, delay: float) -> None:
    n_out = int(req.get("max_completion_tokens") or req.get("max_tokens") or 16)
    prompt = " ".join(m.get("content", "") for m in req.get("messages", []))
    n_in = len(prompt.split()) + 5
    STATE["requests"] += 1
    STATE["tokens"] += n_out
    usage = {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}
    if not req.get("stream"):
        body = {
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "x " * n_out}}],
            "usage": usage,
        }
        await _respond(writer, "200 OK", json.dumps(body).encode(), "application/json")
        return
    head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    writer.write(head.encode())
    first = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}
    writer.write(_chunk(b"data: " + json.dumps(first).encode() + b"\n\n"))
    for i in range(n_out):
        delta = {"choices": [{"index": 0, "delta": {"content": f" w{i}"}, "finish_reason": None}]}
        writer.write(_chunk(b"data: " + json.dumps(delta).encode() + b"\n\n"))
        if delay:
            await writer.drain()
            await asyncio.sleep(delay)
        elif i % 16 == 0:
            await writer.drain()
    last = {"choices": [], "usage": usage}
    writer.write(_chunk(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n"))
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if method == "POST" and path == "/v1/chat/completions":
                await _chat(writer, json.loads(body), delay)
            elif method == "POST" and path == "/tokenize":
                words = json.loads(body).get("content", "").split()
                await _respond(
                    writer,
                    "200 OK",
                    json.dumps({"tokens": list(range(len(words)))}).encode(),
                    "application/json",
                )
            elif path == "/health":
                await _respond(writer, "200 OK", b'{"status":"ok"}', "application/json")
            elif path == "/props":
                await _respond(writer, "200 OK", b'{"default_generation_settings":{"n_ctx":4096}}', "application/json")
            elif path == "/metrics":
                text = f"stub:requests_total {STATE['requests']}\nstub:tokens_total {STATE['tokens']}\n"
                await _respond(writer, "200 OK", text.encode(), "text/plain")
            else:
                await _respond(writer, "404 Not Found", b"{}", "application/json")
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-delay-ms", type=float, default=0.0)
    args = parser.parse_args()
    delay = args.token_delay_ms / 1000.0
    server = await asyncio.start_server(lambda r, w: _handle(r, w, delay), "127.0.0.1", args.port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())

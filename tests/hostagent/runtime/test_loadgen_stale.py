"""Stale kept-alive connections against a real local HTTP server on loopback.

The server streams OpenAI-style SSE over chunked HTTP/1.1 and keeps the connection alive,
but closes it the moment the next request arrives on it, without reading or answering: the
race the load generator met on the H200 (a pooled connection the engine had just closed),
made to happen on every reuse. Such a request is sent again on a fresh connection, timed
from then, and counted as retried, not failed; a server that answers 500, drops a stream
half-way or closes a fresh connection unanswered still fails, with its cause.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from hostagent.runtime.loadgen import Target, run_benchmark_sync
from serving.benchmarking.profiles import BenchmarkProfile
from serving.benchmarking.results import RunResult

TOKENS = 8
GAP_S = 0.005  # between streamed tokens
STALE_S = 0.4  # how long a reused connection hangs before the server closes it


@dataclass
class Behaviour:
    close_reused: bool = False  # close a kept-alive connection when its next request arrives
    fail: str | None = None  # "500" | "drop" (mid-stream) | "hangup" (fresh connection, no answer)


class SseServer:
    """An OpenAI-style streaming endpoint on 127.0.0.1, run on its own loop in a thread."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.stale_closes = 0
        self.streams = 0
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> SseServer:
        self.thread.start()
        server = asyncio.run_coroutine_threadsafe(asyncio.start_server(self.handle, "127.0.0.1", 0), self.loop)
        self.server = server.result(timeout=5)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)

    @property
    def target(self) -> Target:
        base = f"http://127.0.0.1:{self.port}"
        return Target(chat_url=f"{base}/v1/chat/completions", model="m", health_url=f"{base}/health")

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            keep = await self.answer(reader, writer)
            if keep and self.behaviour.close_reused and await reader.read(1):
                await asyncio.sleep(STALE_S)  # the next request is in; it gets no byte back
                self.stale_closes += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; True when the connection is left open for another."""
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        path = head.split(" ", 2)[1]
        length = next(
            (int(line.split(":")[1]) for line in head.split("\r\n") if line.lower().startswith("content-length:")), 0
        )
        body = json.loads(await reader.readexactly(length)) if length else {}
        if path == "/health":
            return await self.reply(writer, 200, {"status": "ok"})
        if path != "/v1/chat/completions":
            return await self.reply(writer, 404, {"error": "not found"})
        prompt_tokens = len(body["messages"][0]["content"].split()) + 4
        if not body.get("stream"):
            return await self.reply(writer, 200, {"choices": [], "usage": {"prompt_tokens": prompt_tokens}})
        self.streams += 1
        fail = self.behaviour.fail
        if fail == "hangup":
            return False
        if fail == "500":
            return await self.reply(writer, 500, {"error": "boom"})
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunks: list[dict[str, object]] = [{"choices": [{"delta": {"role": "assistant"}}]}]
        chunks += [{"choices": [{"delta": {"content": f" t{i}"}}]} for i in range(body["max_tokens"])]
        chunks.append(
            {"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": body["max_tokens"]}}
        )
        for i, chunk in enumerate(chunks):
            if fail == "drop" and i == 3:
                return False  # the stream stops half-way: no final chunk
            await self.chunk(writer, f"data: {json.dumps(chunk)}\n\n".encode())
            await asyncio.sleep(GAP_S)
        await self.chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True

    @staticmethod
    async def chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()

    @staticmethod
    async def reply(writer: asyncio.StreamWriter, status: int, payload: object) -> bool:
        data = json.dumps(payload).encode()
        head = f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        head += "Connection: close\r\n\r\n"
        writer.write(head.encode() + data)
        await writer.drain()
        return False


@pytest.fixture
def closing_server() -> Iterator[SseServer]:
    with SseServer(Behaviour(close_reused=True)) as server:
        yield server


def run(server: SseServer, *, concurrency: tuple[int, ...], warmup: int = 1) -> RunResult:
    profile = BenchmarkProfile(
        name="t", concurrency=concurrency, num_requests=2, input_tokens=16, output_tokens=TOKENS, warmup_requests=warmup
    )
    return run_benchmark_sync(server.target, profile)


def test_a_stale_kept_alive_connection_is_retried_not_failed(closing_server: SseServer) -> None:
    # Warm-up leaves a kept-alive connection; at concurrency 2 one request lands on it, and
    # by the time it fails the other request has left its own connection in the pool, stale
    # too: a retry taken from the pool fails again (the previous retry did: 1 of 4 failed
    # here, 3 of 24 on the H200). The level at concurrency 1 starts on a stale one again.
    result = run(closing_server, concurrency=(2, 1))

    assert result.status == "completed", result.reason
    assert [(lv.completed, lv.failed) for lv in result.levels] == [(2, 0), (2, 0)]
    assert closing_server.stale_closes >= 2
    assert [lv.retried for lv in result.levels] == [1, 1]
    assert result.retried == 2 == result.to_dict()["retried"]
    assert closing_server.streams == 1 + 4  # each processed once: the stale tries never reached it
    for level in result.levels:
        (retried,) = [r for r in level.requests if r.retried]
        assert retried.ok and retried.output_tokens == TOKENS and retried.error is None
        # Timed from the retry: the stale try hung for STALE_S before it failed, and none of
        # that is in TTFT or E2E; the request's start moved to the retry's.
        assert retried.e2e_ms is not None and retried.e2e_ms < STALE_S * 1000 / 2
        assert retried.start_ms >= STALE_S * 1000


def test_retried_counts_survive_storage_and_old_results_load(closing_server: SseServer) -> None:
    result = run(closing_server, concurrency=(1,))
    stored = json.loads(json.dumps(result.to_dict()))
    again = RunResult.from_dict(stored)
    assert again.retried == result.retried == 1
    assert sum(r.retried for r in again.levels[0].requests) == 1

    for level in stored["levels"]:  # a result stored before the field existed
        del level["retried"]
        for req in level["requests"]:
            del req["retried"]
    del stored["retried"]
    old = RunResult.from_dict(stored)
    assert old.retried == 0 and old.levels[0].completed == 2
    assert not any(r.retried for r in old.levels[0].requests)


@pytest.mark.parametrize(
    ("fail", "cause"),
    [
        ("500", 'HTTP 500: {"error": "boom"}'),
        ("drop", "ClientPayloadError"),
        ("hangup", "ServerDisconnectedError"),
    ],
)
def test_real_failures_keep_their_cause(fail: str, cause: str) -> None:
    with SseServer(Behaviour(fail=fail)) as server:
        result = run(server, concurrency=(1,), warmup=0)
        streams = server.streams

    (level,) = result.levels
    assert (level.completed, level.failed, level.retried) == (0, 2, 0)
    assert result.status == "failed" and result.reason == "no request succeeded"
    for req in level.requests:
        assert not req.ok and not req.retried and req.error is not None and cause in req.error
    assert streams == 2  # a fresh connection that failed is not sent again

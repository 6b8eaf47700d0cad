"""The router when its database is away: before its first table it answers 503 `starting` (and
its /health says so), and a read that fails later keeps the last table it had."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import httpx
import pytest

from bench.bench_frontdoor import metric
from labrouter.app import Router
from serving.lab_routes import Door, LabRoutes

TABLE = LabRoutes((Door(host="gpu-a", url="http://127.0.0.1:9", labels={"coder": "coder-r1"}),))


@pytest.fixture
def router() -> Iterator[tuple[Router, list[LabRoutes | Exception], str]]:
    answers: list[LabRoutes | Exception] = [ConnectionError("the database is away")]

    async def read() -> LabRoutes:
        answer = answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    served = Router(read, port=0, refresh_s=0.05)
    asyncio.run_coroutine_threadsafe(served.start(), loop).result(10)
    try:
        yield served, answers, f"http://127.0.0.1:{served.port}"
    finally:
        asyncio.run_coroutine_threadsafe(served.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)


def ask(url: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", json={"model": "coder", "messages": []}, timeout=5)


def until_health(url: str, status: int) -> httpx.Response:
    for _ in range(100):
        health = httpx.get(f"{url}/health", timeout=5)
        if health.status_code == status:
            return health
        threading.Event().wait(0.05)
    raise AssertionError(f"/health never answered {status}")


def test_no_table_yet_is_503_starting_and_a_failed_read_later_keeps_the_last_table(router) -> None:
    served, answers, url = router
    health = until_health(url, 503)
    assert health.json() == {"status": "starting", "reason": health.json()["reason"]}
    assert "the database is away" in health.json()["reason"]
    early = ask(url)
    assert early.status_code == 503 and early.json()["error"]["code"] == "starting"
    assert early.headers["Retry-After"] == "1"
    failed = metric(url, "router_route_table_read_failures_total")
    assert failed >= 1 and metric(url, "router_route_table_age_seconds") > 0  # no table yet: since the start
    assert metric(url, "router_requests_total", host="", alias="", code="503") == 1

    answers[0] = TABLE
    until_health(url, 200)
    assert metric(url, "router_route_table_age_seconds") < 1
    answers[0] = ConnectionError("away again")
    failed = metric(url, "router_route_table_read_failures_total")
    threading.Event().wait(0.3)  # several failed reads
    assert metric(url, "router_route_table_read_failures_total") >= failed + 3
    assert metric(url, "router_route_table_age_seconds") >= 0.3  # the kept table ages
    assert httpx.get(f"{url}/health", timeout=5).json()["doors"] == 1
    refused = ask(url)  # gpu-a's door is not there: the table was kept, the door is tried and skipped
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "no_route"
    assert "tried gpu-a" in refused.json()["error"]["message"]
    assert metric(url, "router_failovers_total", host="gpu-a") == 1 and metric(url, "router_door_down") == 1
    assert metric(url, "router_requests_total", host="", alias="coder", code="503") == 1

"""The lab router lists its doors for Prometheus' HTTP service discovery (docs/metrics.md): every
door other machines can reach, down or not (Prometheus then says `up` 0 for it), labelled with its
host's name; behind the router's metrics token when one is set."""

from __future__ import annotations

import asyncio
import threading

import httpx

from labrouter.app import Router
from serving.lab_routes import Door, LabRoutes

TOKEN = "scrape-the-lab-0123456789"  # noqa: S105 - a test's own
TABLE = LabRoutes(
    (
        Door(host="gpu-a", url="http://10.0.0.7:4000", labels={"coder": "coder-r1"}),
        Door(host="gpu-b", url="http://[fd00::8]:4000", labels={"chat": "chat-r2"}, problem="its host is offline"),
        Door(host="laptop", url="", labels={"chat": "chat-r3"}, problem="its door listens on loopback only"),
    )
)


def test_the_doors_are_listed_as_prometheus_targets_with_their_host() -> None:
    async def read() -> LabRoutes:
        return TABLE

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    router = Router(read, port=0, refresh_s=60, metrics_token=TOKEN)
    asyncio.run_coroutine_threadsafe(router.start(), loop).result(10)
    try:
        url = f"http://127.0.0.1:{router.port}/prometheus/doors"
        assert httpx.get(url, timeout=5).status_code == 401
        answer = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
    finally:
        asyncio.run_coroutine_threadsafe(router.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("application/json")
    assert answer.json() == [
        {"targets": ["10.0.0.7:4000"], "labels": {"host": "gpu-a"}},
        {"targets": ["[fd00::8]:4000"], "labels": {"host": "gpu-b"}},
    ]

"""A GPU host's reports are bounded, and what it reported cannot make its pages unusable (issue 24).

The agent API answers a malformed or out-of-range report with 400 and a message, never a 500,
and stores nothing of it: deep JSON, NaN, a timestamp of 1e18, a negative core count, more GPUs
than a host holds, a result over 1 MiB. And a host that reported 5,000 GPUs and a 30 MB result
before these limits existed (written here straight to the database, as its old agent stored
them) still gets a host page, dashboard and API answers of bounded size and query count.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from api.tokens import token_create
from deployments.choices import OperationKind, OperationState
from deployments.models import Operation
from deployments.services.operations import operation_begin, operation_create
from hardware.credentials import host_token_issue
from hardware.models import GPU, EngineSample, GpuSample, Host
from hardware.services import MAX_GPUS_PER_HOST
from tests.test_agent_api import Agent

pytestmark = pytest.mark.django_db

PAGE_BYTES = 200 * 1024  # the host page of a 5,000-GPU host was 13 MiB
# The host page's own fixed reads (tests/deployments/test_host_page_costs.py: 24 warm, 28 cold).
QUERIES = 28


@pytest.fixture
def box(db: Any) -> dict[str, Any]:
    host, token = host_token_issue(name="box", actor=None)
    GPU.objects.create(host=host, index=0, name="NVIDIA H100", memory_bytes=80 * 1024**3)
    return {"host": host, "agent": Agent(token), "token": token}


def _raw(agent: Agent, path: str, raw: str) -> Any:
    return agent.client.post(
        f"/agent/v1/{path}", data=raw, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {agent.token}"
    )


def _refused(response: Any, *words: str) -> str:
    assert response.status_code == 400, (response.status_code, response.content[:300])
    message = response.json()["error"]
    for word in words:
        assert word in message, message
    return message


def _gpu(index: int) -> dict[str, Any]:
    return {"index": index, "name": "NVIDIA H100", "uuid": f"GPU-{index}", "memory_total_bytes": 80 * 1024**3}


def test_deep_json_is_refused_with_400(box: dict[str, Any]) -> None:
    """Deep enough to be Python's RecursionError (a 500 before), and deep enough to store."""
    agent = box["agent"]
    _refused(_raw(agent, "heartbeat", '{"engine_state": ' + "[" * 100_000 + "]" * 100_000 + "}"), "nested")
    deep: Any = {"running": False}
    for _ in range(40):
        deep = {"x": deep}
    _refused(agent.post("heartbeat", {"engine_state": deep}), "nested")
    assert Host.objects.get(pk=box["host"].pk).engine_state == {}


def test_a_timestamp_of_1e18_is_refused_with_400(box: dict[str, Any]) -> None:
    agent = box["agent"]
    sample = {"index": 0, "timestamp": 1e18, "utilization_gpu_percent": 50}
    _refused(agent.post("telemetry", {"gpu_samples": [sample]}), "gpu_samples[0].timestamp", "out of range")
    _refused(agent.post("telemetry", {"engine_samples": [{"ts": -1e18, "requests_running": 1}]}), "ts")
    _refused(agent.post("telemetry", {"gpu_samples": [{**sample, "timestamp": 32503680000}]}), "timestamp")  # 3000
    started = {"key": "k", "started_at": "9999-01-01T00:00:00+00:00"}
    _refused(agent.post("engine-log", {"run": started, "offset": 0, "end": 2, "lines": ["a"]}), "started_at")
    assert not GpuSample.objects.exists() and not EngineSample.objects.exists()


def test_a_nan_metric_is_refused_with_400(box: dict[str, Any]) -> None:
    agent = box["agent"]
    for metric in ("NaN", "Infinity", "-Infinity"):
        body = '{"engine_state": {"running": true}, "engine_metrics": {"kv_cache_usage": ' + metric + "}}"
        _refused(_raw(agent, "heartbeat", body), metric.lstrip("-"), "null")
    _refused(agent.post("heartbeat", {"engine_metrics": {"requests_running": -3}}), "requests_running")
    _refused(agent.post("heartbeat", {"engine_metrics": {f"m{i}": 1 for i in range(100)}}), "at most 64")
    host = Host.objects.get(pk=box["host"].pk)
    assert host.engine_metrics == {} and host.engine_state == {} and not EngineSample.objects.exists()


@pytest.mark.parametrize("endpoint", ["register", "probe"])
def test_a_negative_core_count_is_refused_with_400(box: dict[str, Any], endpoint: str) -> None:
    agent = box["agent"]
    for facts in ({"cpu_logical_cores": -4}, {"cpu_logical_cores": 2**40}, {"memory_total_bytes": -1}):
        _refused(agent.post(endpoint, {"facts": facts, "inventory": {"gpus": []}}), "facts.")
    _refused(agent.post(endpoint, {"facts": {}, "inventory": {"gpus": [{**_gpu(0), "power_limit_w": -1}]}}), "power")
    _refused(agent.post(endpoint, {"facts": {}, "inventory": {"driver_version": "5" * 41}}), "driver_version")
    host = Host.objects.get(pk=box["host"].pk)
    assert host.cpu_cores is None and host.last_probe_at is None and host.gpus.count() == 1


def test_more_gpus_than_a_host_holds_are_refused_with_400(box: dict[str, Any]) -> None:
    agent = box["agent"]
    many = [_gpu(i) for i in range(MAX_GPUS_PER_HOST + 1)]
    _refused(agent.post("register", {"facts": {}, "inventory": {"gpus": many}}), "inventory.gpus", "at most 256")
    twice = [_gpu(0), _gpu(0)]
    _refused(agent.post("register", {"facts": {}, "inventory": {"gpus": twice}}), "twice")
    assert list(GPU.objects.filter(host=box["host"]).values_list("name", flat=True)) == ["NVIDIA H100"]
    eight = [_gpu(i) for i in range(8)]
    accepted = agent.post("register", {"facts": {"cpu_logical_cores": 64}, "inventory": {"gpus": eight}})
    assert accepted.status_code == 200 and accepted.json()["gpus"] == 8


def test_an_oversized_operation_result_is_refused_with_400(box: dict[str, Any], operator: User) -> None:
    agent = box["agent"]
    op = operation_create(kind=OperationKind.PROBE, host=box["host"], actor=operator)
    assert agent.post(f"operations/{op.pk}/begin", {"worker": "w"}).json()["begun"] is True
    big = {"blob": "x" * (1024 * 1024 + 1)}
    _refused(agent.post(f"operations/{op.pk}/finish", {"state": "succeeded", "result": big}), "result", "1,048,576")
    _refused(agent.post(f"operations/{op.pk}/progress", {"progress": float("1e3")}), "progress")
    op.refresh_from_db()
    assert op.state == OperationState.RUNNING and op.result == {}
    done = agent.post(f"operations/{op.pk}/finish", {"state": "succeeded", "result": {"ok": True}})
    assert done.json() == {"recorded": True}


def test_a_long_progress_log_keeps_its_tail_with_a_note(box: dict[str, Any], operator: User) -> None:
    op = operation_create(kind=OperationKind.PROBE, host=box["host"], actor=operator)
    operation_begin(op_id=op.pk, worker="w")
    log = "head\n" + "y" * (400 * 1024) + "\nthe last line"
    assert box["agent"].post(f"operations/{op.pk}/progress", {"log": log}).status_code == 200
    op.refresh_from_db()
    assert "characters of this report's log were cut" in op.log and op.log.rstrip().endswith("the last line")
    assert "head" not in op.log


# --- pages over what an old agent stored --------------------------------------------------------


@pytest.fixture
def flooded(box: dict[str, Any], operator: User) -> dict[str, Any]:
    """5,000 GPU rows, each with a peer table, and a 30 MB result: what an agent could store before."""
    host = box["host"]
    GPU.objects.filter(host=host).delete()
    peers = {str(p): {"read": "ok", "write": "ok", "topology": "system"} for p in range(20)}
    GPU.objects.bulk_create(
        GPU(host=host, index=i, name="NVIDIA H100", uuid=f"GPU-{i:032d}", memory_bytes=80 * 1024**3, peers=peers)
        for i in range(5000)
    )
    op = Operation.objects.create(
        kind=OperationKind.BENCHMARK,
        host=host,
        state=OperationState.SUCCEEDED,
        exclusive=False,
        result={"status": "completed", "blob": "z" * (30 * 1024 * 1024)},
    )
    viewer = Client()
    viewer.force_login(operator)
    return {**box, "op": op, "client": viewer, "user": operator}


def test_a_host_that_stored_5000_gpus_and_a_30_mb_result_gets_a_bounded_host_page(
    flooded: dict[str, Any], django_assert_max_num_queries: Any
) -> None:
    with django_assert_max_num_queries(QUERIES):
        page = flooded["client"].get("/hosts/box/")
    assert page.status_code == 200
    assert len(page.content) < PAGE_BYTES, len(page.content)
    text = page.content.decode()
    assert "and 4,936 more GPUs" in text and "GPU-00000000000000000000000000000063" in text
    assert "GPU-00000000000000000000000000000064" not in text
    assert text.count("P2P read") <= 64 * 16 and "and 4 more" in text
    assert "zzzz" not in text

    with django_assert_max_num_queries(QUERIES):
        dashboard = flooded["client"].get("/")
    assert dashboard.status_code == 200 and len(dashboard.content) < PAGE_BYTES, len(dashboard.content)
    assert "and 4,936 more GPUs" in dashboard.content.decode()
    table = flooded["client"].get("/hosts/cards/?view=table")
    assert table.status_code == 200 and "5000× H100" in table.content.decode()


def test_the_api_bounds_a_flooded_host_and_a_30_mb_result(flooded: dict[str, Any]) -> None:
    token = token_create(user=flooded["user"], name="t", actor=flooded["user"]).secret
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    client = Client()
    for path in ("/api/v1/hosts/", "/api/v1/hosts/box/"):
        answer = client.get(path, **auth)
        assert answer.status_code == 200 and len(answer.content) < PAGE_BYTES, (path, len(answer.content))
    one = client.get("/api/v1/hosts/box/", **auth).json()
    assert len(one["gpus"]) == 64 and one["gpus_more"] == 4936
    op = client.get(f"/api/v1/operations/{flooded['op'].pk}/", **auth)
    assert op.status_code == 200 and len(op.content) < 64 * 1024, len(op.content)
    result = op.json()["result"]
    assert result["truncated"] is True and result["bytes"] > 30 * 1024 * 1024 and len(result["excerpt"]) <= 4096
    page = flooded["client"].get(f"/operations/{flooded['op'].pk}/")
    assert page.status_code == 200 and len(page.content) < PAGE_BYTES


def test_a_nan_from_the_engine_is_sent_as_no_reading() -> None:
    """The agent's side: an engine's NaN gauge (0/0) must not get its heartbeats refused."""
    from hostagent.loops import _finite

    assert [_finite(v) for v in (float("nan"), float("inf"), 0.5, None, 3)] == [None, None, 0.5, None, 3]
    assert json.dumps({"v": _finite(float("nan"))}) == '{"v": null}'


def test_a_host_event_whose_reason_holds_nul_or_a_lone_surrogate_is_kept_not_a_500(box: dict[str, Any]) -> None:
    """An agent's own event (agent.restarted, door.down) is report text like a watchdog's message:
    NUL and lone surrogates, which PostgreSQL stores neither of, are replaced, never a 500."""
    agent = box["agent"]
    response = _raw(agent, "events", '{"kind": "door.down", "reason": "refused\\u0000 on \\ud800 port 8080"}')
    assert response.status_code == 200, (response.status_code, response.content[:300])
    event = box["host"].events.get()
    assert event.kind == "door.down"
    assert "refused" in event.reason and "port 8080" in event.reason and "\x00" not in event.reason
    _refused(agent.post("events", {"kind": "door.down", "reason": ["not", "text"]}), "reason")

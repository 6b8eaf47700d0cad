"""The front door end to end: the real panel (live server, PostgreSQL), the real agent process
(Celery worker on its own queue, the door on a port of the test's), real llama-servers serving the
shipped Gemma 3 270M as two revisions (1,024 and 2,048 tokens of context), and the official
`openai` client through the door: an on-demand load, an alias moved, and a revision taken out of
the serving set while both models stream. No request fails."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from openai import OpenAI

from deployments.choices import OperationState
from deployments.models import FrontDoor
from deployments.services.aliases import alias_set
from deployments.services.serving_set import serving_mode_set
from deployments.services.switch import switch_request
from deployments.services.usage import usage_totals
from tests.support.llama import free_port
from tests.support.operations import wait_done
from tests.support.revisions import make_revision

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]
DOOR_PORT = free_port()
DOOR = {"CONTROLPANEL_FRONT_DOOR_BIND": f"127.0.0.1:{DOOR_PORT}", "CONTROLPANEL_AGENT_SERVING_S": "0.3"}
ASK = [{"role": "user", "content": "Say hello."}]


def until(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.1)
    return found


def listed() -> set[str]:
    try:
        return {m["id"] for m in httpx.get(f"http://127.0.0.1:{DOOR_PORT}/v1/models", timeout=5).json()["data"]}
    except httpx.HTTPError:
        return set()


def phases() -> dict[str, str]:
    rows = httpx.get(f"http://127.0.0.1:{DOOR_PORT}/frontdoor/state", timeout=5).json()["models"]
    return {row["name"]: row["phase"] for row in rows}


@pytest.mark.parametrize("lab", [DOOR], indirect=True)
def test_an_on_demand_load_an_alias_switch_and_an_unload_under_load_through_the_agents_door(
    lab: dict[str, Any], operator: User
) -> None:
    host = lab["host"]
    r1 = lab["rev"]("pinned, short context", 1024, threads=1)
    wide = dict(ctx_size=2048, parallel=2, n_gpu_layers=0, threads=1)
    r2 = make_revision(
        host=host, engine="llama.cpp", model_variant=lab["gemma"], served_name="gemma-wide", port=free_port(),
        knobs=wide, message="on demand, wide context", actor=operator,
    )  # fmt: skip
    op = wait_done(switch_request(revision=r1, actor=operator))
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    serving_mode_set(revision=r2, mode="on-demand", idle_ttl_s=None, actor=operator)
    alias_set(host=host, name="coder", revision=r1, actor=operator)
    alias_set(host=host, name="fast", revision=r2, actor=operator)
    until("the door serves both revisions", lambda: {"coder", "fast", "gemma-r1", "gemma-wide-r2"} <= listed())
    assert phases()["gemma-wide-r2"] == "unloaded"
    client = OpenAI(base_url=f"http://127.0.0.1:{DOOR_PORT}/v1", api_key="none", max_retries=0, timeout=120)

    # An on-demand load: the first request for `fast` waits while the agent starts r2's engine.
    answer = client.chat.completions.create(model="fast", messages=ASK, max_tokens=3)
    assert answer.model == "gemma-wide" and answer.choices[0].message.content
    assert phases()["gemma-wide-r2"] == "loaded"

    # An alias switch: `fast` moves to r1; the next request for it is r1's.
    alias_set(host=host, name="fast", revision=r1, actor=operator)
    until(
        "fast is r1's",
        lambda: client.chat.completions.create(model="fast", messages=ASK, max_tokens=2).model == "gemma",
    )

    # An unload under load: r2 leaves the serving set while it and r1 both stream.
    failures: list[BaseException] = []
    tokens: dict[str, int] = {"coder": 0, "gemma-wide-r2": 0}

    def stream(name: str) -> None:
        try:
            ask = [{"role": "user", "content": "Count from one to forty, in words."}]
            for chunk in client.chat.completions.create(model=name, messages=ask, max_tokens=48, stream=True):
                if chunk.choices and chunk.choices[0].delta.content:
                    tokens[name] += 1
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failures.append(exc)

    threads = [threading.Thread(target=stream, args=(name,)) for name in tokens]
    for thread in threads:
        thread.start()
    until("both streams flow", lambda: all(tokens.values()))
    serving_mode_set(revision=r2, mode="off", actor=operator)
    for thread in threads:
        thread.join(120)
    assert failures == [] and all(n > 10 for n in tokens.values()), (failures, tokens)
    until("r2 is unloaded and gone from the door", lambda: "gemma-wide-r2" not in listed())

    # The panel has the door's report: its state (with what r1's engine holds) and the usage.
    def r1_reported() -> bool:
        door = FrontDoor.objects.filter(host=host).first()
        rows = door.state if door is not None else []
        return any(
            r["name"] == "gemma-r1" and r["phase"] == "loaded" and r.get("measured", {}).get("ram") for r in rows
        )

    def usage() -> dict[str, dict[str, Any]]:
        return {row["model"]: row for row in usage_totals(by=("model",), host=host)}

    until("the report names r1 loaded, with its engine's memory", r1_reported)
    counted = until("usage of both", lambda: len(usage()) >= 2 and usage())
    assert counted["gemma-wide-r2"]["errors"] == 0 and counted["gemma-r1"]["errors"] == 0

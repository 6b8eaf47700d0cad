"""The engine's log from a real llama-server to the panel through the real agent (no database,
its own host token): a switch's start arrives line by line, an agent killed and started again
resumes where the panel stands (no line twice, new lines still arrive), and the next switch is a
new start with its own log."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest
from django.contrib.auth.models import User

from deployments.models import EngineLogRun
from deployments.services.switch import switch_request
from tests.support.operations import wait_done

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]
LISTENING = "listening on http://"


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"waited {timeout:.0f} s for {what}")


def _text(run_pk: int) -> str:
    return EngineLogRun.objects.get(pk=run_pk).text


def test_a_switch_log_arrives_survives_an_agent_restart_and_the_next_start_is_its_own(
    lab, operator: User, tmp_path
) -> None:
    host = lab["host"]
    r1 = lab["rev"]("first", 2048)
    assert wait_done(switch_request(revision=r1, actor=operator)).state == "succeeded"
    runs = EngineLogRun.objects.filter(host=host)
    wait_for(
        lambda: runs.filter(text__contains=LISTENING).exists(),
        f"the start's log on the panel; {list(runs.values_list('key', 'lines', 'received'))}; "
        f"{sorted((p.name, p.stat().st_size) for p in lab['agent'].state_dir.rglob('*.log'))}",
    )
    first = runs.get()
    assert first.revision_id == r1.pk and first.engine == "llama.cpp"
    assert "model loaded" in first.text  # the engine's own start-up lines, not our summary

    # The agent dies and another takes over: it resumes where the panel stands.
    lab["agent"].kill()
    lab["agent"] = lab["agent"].sibling(tmp_path / "agent2.log").start()
    lab["agent"].wait_registered()
    before = _text(first.pk).count("processing task")
    reply = httpx.post(
        f"http://127.0.0.1:{lab['port']}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4},
        timeout=60,
    )
    assert reply.status_code == 200
    wait_for(lambda: _text(first.pk).count("processing task") > before, "the request's lines after the restart")
    assert _text(first.pk).count(LISTENING) == 1  # nothing sent twice

    # The next switch is a new start, with its own log; the first keeps its own.
    r2 = lab["rev"]("second", 4096)
    assert wait_done(switch_request(revision=r2, actor=operator)).state == "succeeded"
    wait_for(lambda: runs.filter(revision=r2, text__contains=LISTENING).exists(), "the second start's log")
    assert runs.count() == 2
    second = runs.get(revision=r2)
    assert "n_ctx_slot = 4096" in second.text
    assert _text(first.pk).count(LISTENING) == 1


def test_a_failed_start_is_kept_and_listed_with_its_errors(lab, operator: User, client) -> None:
    """A start that dies at once (llama-server refuses --split-mode tensor on a host with no GPU,
    0.5 s) still gets its own log on the panel, listed among the earlier starts, and the filter
    shows its errors: the log one needs is the failed start's."""
    host = lab["host"]
    r1 = lab["rev"]("works", 2048)
    assert wait_done(switch_request(revision=r1, actor=operator)).state == "succeeded"
    broken = lab["rev"]("exits at once", 2048, split_mode="tensor")
    assert wait_done(switch_request(revision=broken, actor=operator)).state == "failed"
    runs = EngineLogRun.objects.filter(host=host)
    wait_for(
        lambda: runs.filter(revision=broken, text__contains="exiting due to model loading error").exists(),
        f"the failed start's log on the panel; {list(runs.values_list('revision_label', 'lines'))}",
    )
    failed = runs.get(revision=broken)
    assert _text(failed.pk).count(LISTENING) == 0  # its own lines, not the next or the previous start's
    before = runs.filter(revision=r1).order_by("pk").first()
    assert before is not None and "exiting due to model loading error" not in before.text  # nor in the one before

    client.force_login(operator)
    page = client.get(f"/hosts/{host.name}/engine-log/")
    assert page.status_code == 200
    assert f'href="?run={failed.pk}"' in page.content.decode()  # listed among the starts
    problems = client.get(f"/hosts/{host.name}/engine-log/?run={failed.pk}&problems=1").content.decode()
    assert "exiting due to model loading error" in problems  # llama.cpp's "0.00.452 E srv ..." line
    assert "loading model" not in problems  # its "I srv load_model: loading model" line is not a problem

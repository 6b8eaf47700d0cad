"""The safe model switch, end to end: real Redis broker, a real agent (Celery worker bound to
the host's queue) in another process, real PostgreSQL, real llama-server with the real
Gemma 3 270M model."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from deployments.choices import OperationState
from deployments.models import ModelVariant, Operation, active_revision_id_of
from deployments.services.operations import HostBusyError
from deployments.services.switch import switch_request
from hardware.models import Host
from hostagent.local import supervisor_for
from tests.support.operations import wait_done

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def served_models(port: int) -> list[str]:
    return [m["id"] for m in httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()["data"]]


def test_switch_between_revisions_and_back(lab, operator):
    r1 = lab["rev"]("gemma at 2k", 2048)
    r2 = lab["rev"]("gemma at 4k", 4096)
    for target in (r1, r2, r1):
        op = wait_done(switch_request(revision=target, actor=operator))
        assert op.state == OperationState.SUCCEEDED, op.log + op.error
        assert op.result["revision"] == target.number
        host = Host.objects.get(pk=lab["host"].pk)
        assert active_revision_id_of(host) == target.pk
        assert served_models(lab["port"]) == ["gemma"]
        props = httpx.get(f"http://127.0.0.1:{lab['port']}/props", timeout=5).json()
        assert props["default_generation_settings"]["n_ctx"] == target.knobs["ctx_size"]
    assert "[ready]" in op.log


def test_broken_revision_rolls_back_to_the_previous_one(lab, operator):
    good = lab["rev"]("gemma at 2k", 2048)
    assert wait_done(switch_request(revision=good, actor=operator)).state == OperationState.SUCCEEDED
    # Not a missing file: the preflight refuses that before anything is stopped
    # (tests/deployments/test_switch_preflight.py). A file that is there but is no model passes
    # the preflight and fails in the engine itself.
    garbage = lab["tmp"] / "not-a-model.gguf"
    garbage.write_bytes(b"this is not a GGUF file\n" * 64)
    missing = ModelVariant.objects.create(name=f"garbage-{uuid.uuid4().hex[:6]}", format="gguf", gguf_file=str(garbage))
    broken = lab["rev"]("a model file that is not a model", 2048, model=missing)

    op = wait_done(switch_request(revision=broken, actor=operator))

    assert op.state == OperationState.FAILED
    assert op.result["rolled_back"] is True
    assert op.result["log_tail"], "the engine's own log explains the failure"
    assert "rolled back to r1" in op.error
    assert active_revision_id_of(Host.objects.get(pk=lab["host"].pk)) == good.pk
    assert served_models(lab["port"]) == ["gemma"]


def test_a_base_model_recorded_for_chat_fails_the_gate_with_the_reason_and_rolls_back(lab, operator, client):
    """The suite's GGUF is Gemma 3 270M, the base model, with Gemma's chat template written into its
    header: imported, it lands as a chat model (a chat template is what a chat release carries). Recorded
    as a chat model, it answers the test chat with the question itself: the switch fails with that reason
    on the operation and its page, and the previous revision serves again."""
    from django.urls import reverse

    from deployments.services.imports import model_variant_import_gguf
    from tests.support.llama import gemma_model_path

    good = lab["rev"]("gemma for completions", 2048)
    assert wait_done(switch_request(revision=good, actor=operator)).state == OperationState.SUCCEEDED
    imported = model_variant_import_gguf(path=gemma_model_path(), name=f"gemma-{uuid.uuid4().hex[:6]}", actor=operator)
    assert imported.purpose == "chat" and "nothing in its names or metadata marks a base model" in imported.source
    chat = lab["rev"]("the same GGUF, recorded as a chat model", 2048, model=imported)

    op = wait_done(switch_request(revision=chat, actor=operator))

    assert op.state == OperationState.FAILED and op.result["rolled_back"] is True, op.log + op.error
    reason = op.result["reason"]
    assert reason.startswith("the test chat was answered with the question itself ('Say hello in one word.")
    assert "mark it as a completions model (base) in the model catalog" in reason
    assert op.error == f"r2 failed ({reason}); rolled back to r1, which is serving again."
    assert active_revision_id_of(Host.objects.get(pk=lab["host"].pk)) == good.pk
    assert served_models(lab["port"]) == ["gemma"]
    client.force_login(operator)
    page = client.get(reverse("deployments:operation_detail", args=[op.pk])).content.decode()
    assert "Failed, rolled back" in page and "answered with the question itself" in page


def test_a_second_switch_on_the_same_host_is_refused_while_one_runs(lab, operator):
    r1 = lab["rev"]("gemma at 2k", 2048)
    r2 = lab["rev"]("gemma at 4k", 4096)
    first = switch_request(revision=r1, actor=operator)
    with pytest.raises(HostBusyError) as exc:
        switch_request(revision=r2, actor=operator)
    assert "busy" in str(exc.value) and "otto" in str(exc.value)
    assert Operation.objects.filter(host=lab["host"]).count() == 1
    assert wait_done(first).state == OperationState.SUCCEEDED
    # Once it ended, the host is free again.
    assert wait_done(switch_request(revision=r2, actor=operator)).state == OperationState.SUCCEEDED


def test_killed_worker_leaves_no_lock_and_the_operation_ends_lost(lab, operator):
    r1 = lab["rev"]("gemma at 2k", 2048)
    op = switch_request(revision=r1, actor=operator)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        op.refresh_from_db()
        if op.state == OperationState.RUNNING and op.stage in ("launching", "loading", "verify", "ready"):
            break
        time.sleep(0.05)
    assert op.state == OperationState.RUNNING
    lab["agent"].kill()

    # A new worker for the same host: the interrupted operation ends `lost`, the lock is free,
    # and the host's real state is read back from the host itself.
    agent = lab["agent"].sibling(lab["tmp"] / "agent2.log").start()
    lab["agent"] = agent
    agent.wait_registered()
    op.refresh_from_db()
    assert op.state == OperationState.LOST
    assert "stopped in the middle" in op.error
    host = Host.objects.get(pk=lab["host"].pk)
    status = supervisor_for(host.name).status()
    assert host.engine_state["running"] == status.running
    if status.running:
        assert host.engine_state["revision_id"] == str(r1.pk)
    again = wait_done(switch_request(revision=r1, actor=operator))
    assert again.state == OperationState.SUCCEEDED, again.log + again.error
    assert active_revision_id_of(Host.objects.get(pk=host.pk)) == r1.pk

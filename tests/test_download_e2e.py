"""A model from a hub repository to a host's disk to a served engine, end to end, with real parts:
the real huggingface_hub client against the local hub (tests/support/fake_hub.py, serving the real
Gemma 3 270M GGUF behind a gated repository), a real host agent process (Celery worker on its own
queue, no database URL, its own token), the panel as a real HTTP server, real llama-server.

import by repository id (a token from a host secret) -> a switch refused while the weights are not
on the host -> download as its own operation (cut mid-way by the hub and resumed with Range, bytes
and rate in the operation, the token for this operation only) -> switch -> the engine serves the
downloaded copy -> the copy cannot be deleted while it serves."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import pytest
from django.core.exceptions import ValidationError

from deployments.choices import OperationState
from deployments.models import HostModel
from deployments.services.host_models import download_request, host_model_delete_request, host_model_list
from deployments.services.hub_imports import model_variant_import_hub
from deployments.services.secrets import secret_set
from deployments.services.switch import WeightsMissing, switch_request
from hardware.models import Host
from hostagent.local import supervisor_for
from tests.support.fake_hub import FakeHub
from tests.support.llama import free_port, gemma_package_path
from tests.support.operations import wait_done
from tests.support.revisions import make_revision

pytestmark = [pytest.mark.engine, pytest.mark.celery, pytest.mark.django_db(transaction=True)]
# Named for what the file is: the base model (its header names no fine-tune), imported for completions.
REPO = "ggml-org/gemma-3-270m-GGUF"
GGUF = "gemma-3-270m-Q4_K_M.gguf"
TOKEN = "hf_e2e_token_only_this_download_sees_0123"


@pytest.fixture
def hub():
    hub = FakeHub().start()
    # The package's file (no chat template): the base model, which the import reads as one (for completions).
    hub.add_repo(REPO, {GGUF: Path(gemma_package_path()), "README.md": b"# Gemma\n"}, gated="manual")
    hub.grant(TOKEN, REPO)
    yield hub
    hub.stop()


@pytest.fixture
def ollama():
    from tests.support.fake_ollama import FakeOllama

    server = FakeOllama({"qwen3:0.6b": [522_653_696, 1_542, 11_338, 490]}).start()
    yield server
    server.stop()


@pytest.fixture
def agent(hub, ollama, tmp_path, settings, live_server, catalog):
    from hardware.credentials import host_token_issue
    from tests.support.agent import AgentProcess

    name = f"dl-{uuid.uuid4().hex[:8]}"
    state = tmp_path / "state"
    settings.HOST_STATE_DIR = state
    _host, token = host_token_issue(name=name, actor=None)
    models = tmp_path / "models"
    models.mkdir()
    process = AgentProcess(
        name,
        state,
        tmp_path / "agent.log",
        panel_url=live_server.url,
        token=token,
        extra_env={"HF_ENDPOINT": hub.url, "CONTROLPANEL_MODEL_DIRS": str(models), "OLLAMA_HOST": ollama.url},
    ).start()
    try:
        process.wait_registered()
        yield process
    finally:
        process.stop()
        supervisor_for(name).stop(grace=5)


def test_import_download_switch_serve(hub, agent, monkeypatch, operator, admin_user, tmp_path):
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    host = Host.objects.get(name=agent.name)
    secret_set(host=host, name="hf-token", value=TOKEN, actor=admin_user, hub_token=True)

    # Import by repository id: the gated repo's header read with the host secret's token.
    variant = model_variant_import_hub(repo_id=REPO, token=f"{host.name}/hf-token", actor=operator)
    item = hub.repos[REPO].files[GGUF]
    assert variant.revision == hub.repos[REPO].sha and variant.weights_bytes == item.size
    assert variant.purpose == "completions"
    revision = make_revision(
        host=host,
        engine="llama.cpp",
        model_variant=variant,
        served_name="gemma",
        port=free_port(),
        knobs={"ctx_size": 2048, "parallel": 1, "n_gpu_layers": 0},
        hf_token_secret="hf-token",
        message="gemma from the hub",
        actor=operator,
    )

    # Not on the host yet: the switch is refused before anything is sent, and says what to do.
    with pytest.raises(WeightsMissing) as missing:
        switch_request(revision=revision, actor=operator)
    assert "download it to the host first" in str(missing.value)

    # The download, as its own operation; the hub cuts the body once at 64 MiB.
    hub.cut_after[item.sha256] = 64 * 2**20
    op = wait_done(download_request(host=host, variant=variant, token_secret="hf-token", actor=operator), 180)
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    # (the import's header reads were "bytes=0-N" ranges; the download is a whole GET, cut, then the rest)
    gets = [g["range"] for g in hub.body_requests(item.sha256) if not (g["range"] or "").startswith("bytes=0-")]
    assert len(gets) == 2 and gets[0] is None and gets[1].startswith("bytes=") and gets[1].endswith("-")
    assert 0 < int(gets[1][6:-1]) <= 64 * 2**20  # resumed where the cut left the file
    assert not any(g["token"] for g in hub.body_requests(item.sha256))  # the CDN never sees the token
    assert any(r["token"] for r in hub.requests if r["method"] == "HEAD" and "/resolve/" in r["path"])
    assert "MiB/s" in op.log and "every checksum matches the hub" in op.log
    copy = HostModel.objects.get(host=host, model_variant=variant)
    expected = Path(agent.environment()["CONTROLPANEL_MODEL_DIRS"]) / "hub" / "ggml-org" / "gemma-3-270m-GGUF"
    assert copy.path == str(expected / variant.revision[:12] / GGUF) and copy.verified
    assert Path(copy.path).stat().st_size == item.size == copy.size_bytes
    assert TOKEN not in op.log + str(op.result) + str(op.params)

    # The switch now runs the downloaded copy.
    done = wait_done(switch_request(revision=revision, actor=operator), 120)
    assert done.state == OperationState.SUCCEEDED, done.log + done.error
    served = httpx.get(f"http://127.0.0.1:{revision.port}/v1/models", timeout=5).json()
    assert served["data"][0]["id"] == "gemma"
    reply = httpx.post(
        f"http://127.0.0.1:{revision.port}/v1/chat/completions",
        json={"model": "gemma", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4},
        timeout=60,
    )
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] is not None
    # The engine opened the copy on the host's disk (its command line, in the engine's own log).
    assert any(copy.path in p.read_text(errors="replace") for p in Path(agent.state_dir).rglob("*.log"))

    # In use: not deleted, and the page says why.
    (row,) = host_model_list(host=Host.objects.get(pk=host.pk))
    assert row.serving is not None and row.serving.pk == revision.pk and "serves it now" in row.delete_refusal
    with pytest.raises(ValidationError):
        host_model_delete_request(copy=copy, actor=operator)

    # The token is nowhere the agent keeps on disk.
    for path in Path(agent.state_dir).rglob("*"):
        if path.is_file():
            assert TOKEN not in path.read_text(errors="replace"), path


def test_cancel_resume_and_delete_through_the_agent(hub, agent, monkeypatch, operator):
    """A slow hub: the download is cancelled mid-way through the panel (the agent hears it in the
    answer to a progress report), a second download asks only for the rest, and the copy, which no
    revision serves, is deleted from the host's disk."""
    from deployments.models import Operation
    from deployments.services.operations import operation_cancel

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    host = Host.objects.get(name=agent.name)
    hub.grant("hf_reader", REPO)
    from deployments.services.secrets import secret_set as set_secret

    set_secret(host=host, name="hf", value="hf_reader", actor=None, hub_token=True)
    variant = model_variant_import_hub(repo_id=REPO, token=f"{host.name}/hf", actor=operator)
    item = hub.repos[REPO].files[GGUF]
    hub.rate = 40 * 2**20  # ~6 s for the file
    first = download_request(host=host, variant=variant, token_secret="hf", actor=operator)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        first.refresh_from_db()
        if first.progress > 0.2:
            break
        time.sleep(0.1)
    assert "MiB of" in first.stage and "/s" in first.stage  # bytes and rate while it runs
    operation_cancel(op=Operation.objects.get(pk=first.pk), actor=operator)
    first = wait_done(first, 60)
    assert first.state == OperationState.CANCELLED and "stays on disk" in first.error
    assert not HostModel.objects.filter(host=host).exists()

    hub.rate = None
    second = wait_done(download_request(host=host, variant=variant, token_secret="hf", actor=operator), 120)
    assert second.state == OperationState.SUCCEEDED, second.log + second.error
    ranges = [g["range"] for g in hub.body_requests(item.sha256) if not (g["range"] or "").startswith("bytes=0-")]
    assert ranges[0] is None and ranges[-1].startswith("bytes=") and int(ranges[-1][6:-1]) > 0.2 * item.size
    assert second.result["bytes_fetched"] == item.size - int(ranges[-1][6:-1])

    copy = HostModel.objects.get(host=host, model_variant=variant)
    folder = Path(copy.path).parent
    deleted = wait_done(host_model_delete_request(copy=copy, actor=operator), 60)
    assert deleted.state == OperationState.SUCCEEDED, deleted.log + deleted.error
    assert not folder.exists() and not HostModel.objects.filter(pk=copy.pk).exists()
    assert deleted.result["freed"] >= item.size


def test_an_ollama_model_is_pulled_through_ollamas_api(agent, ollama, operator):
    """No Ollama server can be installed here: tests/support/fake_ollama.py answers its documented
    pull stream. The agent's progress and the recorded copy come from that stream."""
    import io

    from django.core.management import call_command

    from deployments.models import ModelVariant, Operation

    host = Host.objects.get(name=agent.name)
    tag = ModelVariant.objects.create(name="qwen3:0.6b", format="ollama")
    out = io.StringIO()
    call_command("model", "download", "--host", host.name, "qwen3:0.6b", "--wait", "--timeout", "60", stdout=out)
    assert "Download model of qwen3:0.6b done: ollama:qwen3:0.6b" in out.getvalue()
    op = Operation.objects.get(kind="download", host=host)
    assert op.state == OperationState.SUCCEEDED, op.log + op.error
    assert ollama.pulls == [{"model": "qwen3:0.6b", "stream": True}]
    assert "[ollama] success" in op.log and "pulling" in op.log
    copy = HostModel.objects.get(host=host, model_variant=tag)
    assert copy.path == "ollama:qwen3:0.6b" and copy.size_bytes == 522_653_696 + 1_542 + 11_338 + 490
    listed = io.StringIO()
    call_command("model", "list", "--host", host.name, stdout=listed)
    assert listed.getvalue().startswith("qwen3:0.6b\t522,667,066 bytes\tollama:qwen3:0.6b\tno revision")

    missing = ModelVariant.objects.create(name="no-such:model", format="ollama")
    failed = wait_done(download_request(host=host, variant=missing, actor=operator), 60)
    assert failed.state == OperationState.FAILED and "file does not exist" in failed.error

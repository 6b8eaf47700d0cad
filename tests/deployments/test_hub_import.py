"""Import by repository id (`manage.py model import`, the import page, the service) against the
local hub (tests/support/fake_hub.py) found through HF_ENDPOINT, with the real huggingface_hub:
the catalog entry names the repository and its commit, the files a download needs, and the facts
read from the config, the safetensors index and the generation config, or the GGUF header; a
gated repository takes a token from a host secret; every refusal stores nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from core.models import AuditEvent
from deployments.models import HubImport, ModelVariant
from deployments.planning import plan_request
from deployments.services.hub_imports import hub_import_run
from deployments.services.secrets import secret_set
from serving.planner import catalog_host, plan
from tests.hardware.factories import HostFactory
from tests.support.fake_hub import FakeHub
from tests.support.llama import gemma_model_path

pytestmark = pytest.mark.django_db

CONFIGS = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
GGUF = "gemma-3-270m-it-Q4_K_M.gguf"


@pytest.fixture
def hub(monkeypatch):
    hub = FakeHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    hub.add_repo("unsloth/gemma-3-270m-it-GGUF", {GGUF: Path(gemma_model_path()), "README.md": b"# quants\n"})
    generation = {"temperature": 0.7, "top_p": 0.8, "top_k": 20}
    hub.add_repo(
        "Qwen/Qwen3-32B-AWQ",
        {
            "config.json": (CONFIGS / "qwen3-32b-awq.json").read_bytes(),
            "generation_config.json": json.dumps(generation).encode(),
            "tokenizer.json": b"{}",
            "model-00001-of-00002.safetensors": b"\0" * 2048,
            "model-00002-of-00002.safetensors": b"\0" * 1024,
        },
    )
    # No safetensors listed with sizes: the weights are unknown and the planner estimates them.
    hub.add_repo("acme/next-80b", {"config.json": (CONFIGS / "qwen3-next-80b-a3b.json").read_bytes()})
    hub.add_repo("meta/gated-27b", {"config.json": (CONFIGS / "qwen3.5-27b.json").read_bytes()}, gated="manual")
    hub.grant("hf_secret_value", "meta/gated-27b")
    yield hub
    hub.stop()


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("model", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), str(exc)
    return 0, out.getvalue(), err.getvalue()


def test_command_imports_a_gguf_quant_by_ranges(hub):
    code, out, _ = run("import", "unsloth/gemma-3-270m-it-GGUF")
    assert code == 0, out
    variant = ModelVariant.objects.get(repo_id="unsloth/gemma-3-270m-it-GGUF")
    repo = hub.repos["unsloth/gemma-3-270m-it-GGUF"]
    assert variant.revision == repo.sha and variant.gguf_file == GGUF and variant.format == "gguf"
    assert variant.weights_bytes == Path(gemma_model_path()).stat().st_size
    assert variant.quantization == "Q4_K_M" and variant.arch["num_layers"] == 18 and variant.gguf_kv
    assert [f["name"] for f in variant.hub_files] == [GGUF]
    assert variant.hub_files[0]["sha256"] == repo.files[GGUF].sha256
    assert repo.sha in variant.source and "HTTP ranges" in variant.source
    assert f"Imported {variant.name} from unsloth/gemma-3-270m-it-GGUF@{repo.sha[:12]}" in out
    # The header names no fine-tune, but the file's name marks an instruction tune, and the name counts first.
    assert (
        variant.purpose == "chat"
        and "the file name 'gemma-3-270m-it-Q4_K_M.gguf' marks an instruction tune" in variant.source
    )
    assert out.rstrip().endswith("to download), for chat (instruction-tuned).")
    assert AuditEvent.objects.filter(action="model.import", object_id=str(variant.pk)).exists()


def test_command_imports_a_checkpoint_with_index_size_and_sampling(hub):
    code, out, _ = run("import", "Qwen/Qwen3-32B-AWQ", "--name", "qwen32-awq")
    assert code == 0, out
    variant = ModelVariant.objects.get(name="qwen32-awq")
    assert variant.format == "hf" and variant.quant_method == "awq" and variant.quant_bits == 4
    assert variant.quant_group_size == 128
    assert variant.weights_bytes == 3072  # the safetensors files the hub lists
    assert variant.sampling_presets == {"generation_config": {"temperature": 0.7, "top_p": 0.8, "top_k": 20}}
    names = sorted(f["name"] for f in variant.hub_files)
    assert names == sorted(
        ["config.json", "generation_config.json", "tokenizer.json"]
        + [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)]
    )


def test_weights_unknown_at_import_are_estimated_by_the_planner(hub):
    code, out, _ = run("import", "acme/next-80b")
    assert code == 0 and "weights unknown" in out
    variant = ModelVariant.objects.get(repo_id="acme/next-80b")
    assert variant.weights_bytes is None and "planner estimates" in variant.source
    report = plan(
        plan_request(model=variant, engine="vllm", gpus=catalog_host("h100", 2), knobs={"tensor_parallel_size": 2})
    )
    assert report.finding("weights.estimated") is not None
    assert 140 * 2**30 < report.weights_estimate["bytes"] < 160 * 2**30  # ~80B at bf16


def test_gated_repo_needs_a_secret_and_the_token_never_lands_anywhere(hub, admin_user):
    code, _, error = run("import", "meta/gated-27b")
    assert code == 2 and "gated" in error and not ModelVariant.objects.filter(repo_id="meta/gated-27b").exists()
    host = HostFactory(name="gpu1")
    secret_set(host=host, name="hf-token", value="hf_secret_value", actor=admin_user, hub_token=True)
    code, out, _ = run("import", "meta/gated-27b", "--token-secret", "gpu1/hf-token")
    assert code == 0, out
    variant = ModelVariant.objects.get(repo_id="meta/gated-27b")
    stored = json.dumps([variant.source, variant.hub_files, variant.arch, variant.sampling_presets])
    assert "hf_secret_value" not in stored
    assert not any("hf_secret_value" in json.dumps(e.data) for e in AuditEvent.objects.all())
    # The token went to the hub on the file requests, as a bearer token.
    assert any(r["token"] for r in hub.requests if "/resolve/" in r["path"])


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["import", "nobody/nothing"], "No model repository nobody/nothing"),
        (["import", "Qwen/Qwen3-32B-AWQ", "--revision", "v9"], "no revision"),
        (["import", "unsloth/gemma-3-270m-it-GGUF", "--file", "other.gguf"], "no file other.gguf"),
        (["import", "not a repo"], "not a Hugging Face repository id"),
        (["import", "Qwen/Qwen3-32B-AWQ", "--token-secret", "nohost"], "HOST/NAME"),
    ],
)
def test_bad_input_is_one_line_and_stores_nothing(hub, args, words):
    before = ModelVariant.objects.count()
    code, _, error = run(*args)
    assert code == 2 and words in error and "\n" not in error
    assert ModelVariant.objects.count() == before


def test_the_same_commit_twice_is_refused(hub):
    assert run("import", "Qwen/Qwen3-32B-AWQ")[0] == 0
    code, _, error = run("import", "Qwen/Qwen3-32B-AWQ", "--name", "again")
    assert code == 2 and "already has Qwen/Qwen3-32B-AWQ" in error


def test_import_page_form(hub, client, operator):
    client.force_login(operator)
    page = client.get(reverse("deployments:model_import"))
    assert b'id="import-hub"' in page.content and b"hub-repo_id" in page.content
    # The page answers at once with the import's page; the panel's worker reads the hub (run here
    # as the worker runs it: tests/deployments/test_hub_import_worker.py has the real worker).
    bad = client.post(reverse("deployments:model_import"), {"source": "hub", "hub-repo_id": "nobody/nothing"})
    assert bad.status_code == 302 and not hub.requests
    page = client.get(bad.url).content.decode()
    assert "Queued" in page and "waiting for the panel&#x27;s worker" in page and "hx-trigger" in page
    hub_import_run(import_id=bad.url.rstrip("/").rsplit("/", 1)[-1])
    page = client.get(bad.url).content.decode()
    assert "Failed" in page and "No model repository nobody/nothing" in page and "hx-trigger" not in page
    assert client.get(reverse("deployments:hub_import_status", args=[HubImport.objects.get().pk])).status_code == 286
    done = client.post(
        reverse("deployments:model_import"),
        {"source": "hub", "hub-repo_id": "unsloth/gemma-3-270m-it-GGUF", "hub-file": GGUF},
    )
    assert done.status_code == 302 and not ModelVariant.objects.filter(repo_id="unsloth/gemma-3-270m-it-GGUF")
    job = hub_import_run(import_id=done.url.rstrip("/").rsplit("/", 1)[-1])
    assert job is not None and job.state == "succeeded"
    assert ModelVariant.objects.filter(repo_id="unsloth/gemma-3-270m-it-GGUF", gguf_file=GGUF).get() == job.variant
    assert f"Imported <strong>{job.variant.name}</strong>" in client.get(done.url).content.decode()
    assert hub_import_run(import_id=job.pk) is None  # a message delivered twice acts once
    # What can be refused without the hub is refused on the form, nothing queued.
    empty = client.post(reverse("deployments:model_import"), {"source": "hub", "hub-repo_id": " "})
    assert empty.status_code == 200 and HubImport.objects.count() == 2


def test_the_catalog_shows_an_estimate_as_an_estimate(hub, client, viewer):
    assert run("import", "acme/next-80b")[0] == 0
    client.force_login(viewer)
    page = client.get(reverse("deployments:model_list")).content.decode()
    assert "(estimated)" in page and "79.4B parameters at 16 bits" in page


def test_the_switch_page_offers_the_download_first(hub, client, operator):
    from deployments.models import Operation
    from tests.support.revisions import make_revision

    assert run("import", "unsloth/gemma-3-270m-it-GGUF")[0] == 0
    variant = ModelVariant.objects.get(repo_id="unsloth/gemma-3-270m-it-GGUF")
    host = HostFactory(name="box", model_dirs=["/srv/models"])
    revision = make_revision(
        host=host,
        engine="llama.cpp",
        model_variant=variant,
        knobs={"ctx_size": 2048, "n_gpu_layers": 0},
        message="from the hub",
        actor=operator,
    )
    client.force_login(operator)
    url = reverse("deployments:revision_switch", args=[host.name, revision.number])
    page = client.get(url).content.decode()
    assert "is not on box&#x27;s disk" in page or "is not on box's disk" in page
    assert f'name="model" value="{variant.pk}"' in page
    refused = client.post(url, {"override_reason": ""})
    assert "download it to the host first" in refused.content.decode()
    assert not Operation.objects.filter(kind="switch").exists()
    started = client.post(
        reverse("deployments:host_models", args=[host.name]), {"model": variant.pk, "token_secret": ""}
    )
    op = Operation.objects.get(kind="download", host=host)
    assert started.status_code == 302 and started.url == reverse("deployments:operation_detail", args=[op.pk])
    assert op.params["files"] == variant.hub_files and op.params["revision"] == variant.revision
    assert not op.exclusive  # the engine keeps serving while the files arrive
    again = client.post(reverse("deployments:host_models", args=[host.name]), {"model": variant.pk, "token_secret": ""})
    assert again.status_code == 200 and "already being downloaded" in again.content.decode()
    assert Operation.objects.filter(kind="download", host=host).count() == 1


def test_an_import_whose_worker_went_away_is_marked_lost_by_the_beat(settings, client, operator):
    from datetime import timedelta

    from django.utils import timezone

    from deployments.tasks import reap_lost_operations

    settings.HUB_REQUEST_DEADLINE_S = 3
    now = timezone.now()
    gone = HubImport.objects.create(repo_id="a/b", state="running", started_at=now - timedelta(seconds=121))
    busy = HubImport.objects.create(repo_id="a/c", state="running", started_at=now - timedelta(seconds=30))
    reap_lost_operations()
    assert HubImport.objects.get(pk=gone.pk).state == "lost" and HubImport.objects.get(pk=busy.pk).state == "running"
    client.force_login(operator)
    page = client.get(reverse("deployments:hub_import", args=[gone.pk])).content.decode()
    assert "Lost" in page and "stopped while it read the hub" in page

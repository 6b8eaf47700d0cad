"""The planner fed from the database: catalog variants, declared hosts, the seeds' figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.engine_installs import revision_binary
from deployments.models import ModelVariant
from deployments.planning import gpu_type_specs, plan_for_values, plan_request, revision_plan
from deployments.services.imports import model_variant_import_gguf
from deployments.services.switch import PlanRefused, switch_request
from hardware.models import GpuType
from hardware.services import host_declare
from serving.planner import plan
from serving.planner.findings import ENGINE_GGUF_REMOVED
from tests.support.llama import gemma_package_path
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db
GIB = 1024**3


def test_qwen38_on_the_two_5060ti_lab_matches_the_seed(catalog):
    """Seed 002's lab: fp8 KV at TP=2 on the model's real shapes (config.json: 16 full-attention layers,
    4 KV heads of head_dim 256) -> 2 heads per rank x (256 + 256) x 1 byte x 16 layers = 16 KiB per token
    per GPU, 4 GiB per 262,144-token sequence. The write-up's "~8 KiB, ~2.1 GiB each, four at once"
    would need head_dim 128, which the config does not have: the whole window fits one sequence at a
    time, and the planner says the other three would be preempted.
    """
    model = ModelVariant.objects.get(name="Qwen3.8-27B-W4A16-AWQ")
    gpus = gpu_type_specs(GpuType.objects.get(short_name="RTX 5060 Ti 16GB"), 2)
    report = plan(
        plan_request(
            model=model,
            engine="vllm",
            gpus=gpus,
            engine_version="0.22.0",
            knobs={
                "tensor_parallel_size": 2,
                "max_model_len": 262144,
                "kv_cache_dtype": "fp8",
                "gpu_memory_utilization": 0.95,
                "max_num_seqs": 4,
                "enforce_eager": True,
                "reasoning_parser": "qwen3",
                "tool_call_parser": "qwen3_coder",
                "enable_auto_tool_choice": True,
                "attention_backend": "TRITON_ATTN",
            },
            env={"NCCL_P2P_DISABLE": "1", "VLLM_USE_FLASHINFER_SAMPLER": "0"},
        )
    ).to_dict()
    assert report["kv_bytes_per_token_per_gpu"] == 16 * 1024
    per_sequence_per_gpu = report["kv_bytes_per_token_per_gpu"] * 262144
    assert per_sequence_per_gpu == 4 * GIB
    assert report["gpus_used"] == 2 and report["gpus_present"] == 2
    assert not report["has_errors"], report["findings"]
    assert report["max_context_one_sequence"] >= 262144
    assert report["max_concurrent_full_length"] == 1
    assert "kv.concurrency_short" in {f["code"] for f in report["findings"]}


def test_the_6x3090_lab_as_declared_hosts_plan(catalog, admin_user):
    host = host_declare(
        name="six", address="10.0.0.6", gpus=[(GpuType.objects.get(short_name="RTX 3090"), 6)], actor=admin_user
    )
    model = ModelVariant.objects.get(name="Qwen3.5-27B")
    tp6 = plan_for_values(host=host, model=model, engine="vllm", knobs={"tensor_parallel_size": 6})
    assert tp6.has_errors
    tp4 = plan_for_values(
        host=host, model=model, engine="vllm", knobs={"tensor_parallel_size": 4}, env={"NCCL_P2P_DISABLE": "1"}
    )
    assert tp4.to_dict()["gpus_used"] == 4
    idle = tp4.finding("gpu.idle") or next(f for f in tp4.findings if "idle" in f.code)
    assert "2" in idle.message


@pytest.mark.parametrize(
    ("installs", "carried", "removed"),
    [
        ({}, {}, "vLLM 0.33.0 (the latest release the panel knows)"),  # nothing on the host yet
        (
            {"0.32.0": {"path": "/srv/vllm-0.32"}, "0.23.0": {"path": "/srv/vllm-0.23"}},
            {},
            "vLLM 0.32.0 (what latest runs on this host)",
        ),
        ({"0.23.0": {"path": "/srv/vllm-0.23"}}, {}, None),  # the last release with a GGUF loader
        ({}, {"vllm": "0.23.0"}, None),  # the host's worker carries it
        ({"latest": {"path": "/srv/vllm"}}, {}, "vLLM 0.33.0 (the latest release the panel knows)"),  # unknown
    ],
)
def test_a_revision_at_latest_is_planned_with_the_release_its_host_runs_at_latest(
    catalog, admin_user, installs, carried, removed
):
    """A vLLM revision of a GGUF "at latest" runs the host's newest vLLM install (else the build its
    worker carries): the planner judges that release, so a host on 0.23.0 (which still loads a GGUF)
    is not refused for vLLM 0.24.0's removal of the loader, and one on 0.32.0 is, by its own release."""
    host = host_declare(
        name="gguf-lab", address="10.0.0.7", gpus=[(GpuType.objects.get(short_name="RTX 3090"), 1)], actor=admin_user
    )
    host.engine_installs = {"vllm": installs} if installs else {}
    host.engine_state = {"carried": carried}
    gguf = Path(gemma_package_path())
    host.model_dirs = [str(gguf.parent)]
    host.save(update_fields=["engine_installs", "engine_state", "model_dirs"])
    model = model_variant_import_gguf(path=str(gguf), name="gemma-gguf", actor=admin_user)
    revision = make_revision(host=host, model_variant=model, engine="vllm", engine_version="latest", actor=admin_user)
    report = revision_plan(revision).checked()
    found = report.finding(ENGINE_GGUF_REMOVED)
    if removed is None:
        assert found is None, found
    else:
        assert found is not None and found.message.startswith(f"{removed} has no GGUF loader")
        with pytest.raises(PlanRefused):
            switch_request(revision=revision, actor=admin_user)


@pytest.mark.parametrize("version", ["latest", " latest ", "0.33.0", "v0.33.0"])  # as people and derive() spell them
@pytest.mark.parametrize(
    ("packages", "refused"),
    [
        # The host read its vLLM venv when it recorded the install: vllm-gguf-plugin is there.
        ({"transformers": "5.19.0", "vllm-gguf-plugin": "0.0.5"}, None),
        ({"transformers": "5.19.0", "vllm-gguf-plugin": None}, "and vLLM's venv on this host has no vllm-gguf-plugin"),
        (None, "the panel does not know whether vLLM's venv on this host has it"),  # an install recorded before
    ],
)
def test_a_gguf_on_vllm_0_33_is_planned_with_the_plugin_its_hosts_install_recorded(
    catalog, admin_user, version, packages, refused
):
    """vLLM 0.24 and later load a GGUF only with vllm-gguf-plugin in their venv. A host's recorded 0.33.0
    install says whether its venv has it (the agent reads the venv when it records the install): with
    it, the Gemma GGUF is planned without engine.gguf_removed (a warning says where the plugin reads the
    model's config); without it, or not knowing, the switch is refused and the plugin is named first."""
    host = host_declare(
        name="gguf-lab", address="10.0.0.7", gpus=[(GpuType.objects.get(short_name="RTX 3090"), 1)], actor=admin_user
    )
    entry = {"path": "/srv/vllm-0.33", "distribution": "vllm", "package_version": "0.33.0"}
    older = {"path": "/srv/vllm-0.31", "packages": {"transformers": "5.19.0", "vllm-gguf-plugin": "0.0.5"}}
    recorded = {"0.33.0": {**entry, **({"packages": packages} if packages else {})}, "0.31.0": older}
    host.engine_installs = {"vllm": recorded}
    gguf = Path(gemma_package_path())
    host.model_dirs = [str(gguf.parent)]
    host.save(update_fields=["engine_installs", "model_dirs"])
    model = model_variant_import_gguf(path=str(gguf), name="gemma-gguf", actor=admin_user)
    revision = make_revision(host=host, model_variant=model, engine="vllm", engine_version=version, actor=admin_user)
    # The plan reads the install the host runs: the one whose executable the revision's exports name.
    assert revision_binary(revision) == "/srv/vllm-0.33/bin/vllm"
    report = revision_plan(revision).checked()
    found = report.finding(ENGINE_GGUF_REMOVED)
    if refused is None:
        assert found is None and not report.has_errors, report.findings
        assert report.finding("engine.gguf_config") is not None
        return
    # At latest, the host's newest install, saying so.
    shown = version.strip() if version.strip() != "latest" else "0.33.0 (what latest runs on this host)"
    assert found is not None and found.message.startswith(f"vLLM {shown} has no GGUF loader")
    assert refused in found.message
    assert found.fix.startswith("Install vllm-gguf-plugin into vLLM's venv on the host (GPU builds only)")
    with pytest.raises(PlanRefused):
        switch_request(revision=revision, actor=admin_user)

"""The ten knobs the planner's own table once lacked: a revision with each is made, and a switch to
it is taken through to the preflight, on the panel and on the host.

Before, a vLLM revision with `data_parallel_size=2` was created, then every switch to it was refused
("unknown vllm knob 'data_parallel_size'"), an admin's override included, and the door was told no
memory for it. The GPUs are the recorded H200 (tests/fixtures/nvml/h200_x1.json, telemetry_idle) replayed
through the probe's own `read_samples`, one per index; everything else is real: the services, the
operation row, the agent's order, the host's launch and its preflight."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from deployments import planning
from deployments.agent_api.orders import operation_order
from deployments.choices import OperationState
from deployments.models import ModelVariant
from deployments.planning import revision_memory
from deployments.presenters import report_for_revision
from deployments.services.preflight import panel_preflight
from deployments.services.switch import switch_request
from hardware.models import GPU, Host
from hostagent.launch import launch_spec
from hostagent.preflight import host_preflight
from hostagent.probes.nvml import GpuSample, nvml_session, read_samples
from hostagent.probes.replay import ReplayNvml, load_fixture
from hostagent.runtime.supervisor import Supervisor
from serving.planner import plan
from serving.wire import Order
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db

NVML = load_fixture(Path(__file__).resolve().parent.parent / "fixtures" / "nvml" / "h200_x1.json")
GPUS = 4


def _idle_h200s() -> list[GpuSample]:
    """The recorded idle H200, as the probe reads it, at indices 0..GPUS-1."""
    first = NVML["sessions"]["telemetry_idle"]["result"][0]
    with nvml_session(ReplayNvml.from_fixture(NVML, ["telemetry_idle"])) as lib:
        (gpu,) = read_samples(lib, clock=lambda: first[0]["timestamp"])
    return [dataclasses.replace(gpu, index=i, uuid=f"GPU-{i}", processes=()) for i in range(GPUS)]


@pytest.fixture
def h200s() -> list[GpuSample]:
    return _idle_h200s()


def _host(engine: str, samples: list[GpuSample]) -> Host:
    host = Host.objects.create(name=f"h200-{engine}", nvml_available=True, model_dirs=["/srv/models"])
    for sample in samples:
        GPU.objects.create(
            host=host,
            index=sample.index,
            name="NVIDIA H200",
            memory_bytes=sample.memory_total_bytes,
            compute_capability="9.0",
        )
    return host


def _ollama_model() -> ModelVariant:
    qwen3 = ModelVariant.objects.get(name="Qwen3-32B-AWQ")
    return ModelVariant.objects.create(name="qwen3:32b", format="ollama", weights_bytes=20 * 10**9, arch=qwen3.arch)


# (the knob, engine, model, knobs): each of the ten, with what it needs beside it.
TEN = [
    ("data_parallel_size", "vllm", "Qwen3-32B-AWQ", {"data_parallel_size": 2}),
    ("mamba_block_size", "vllm", "Qwen3.6-35B-A3B-AWQ-4bit", {"mamba_block_size": 256, "enable_prefix_caching": True}),
    ("dp_size", "sglang", "Qwen3-32B-AWQ", {"dp_size": 2}),
    ("ep_size", "sglang", "Qwen3-32B-AWQ", {"tp_size": 2, "ep_size": 2}),
    ("chat_template", "sglang", "Qwen3-32B-AWQ", {"chat_template": "chatml"}),
    (
        "json_model_override_args",
        "sglang",
        "Qwen3-32B-AWQ",
        {"json_model_override_args": {"rope_scaling": {"rope_type": "yarn", "factor": 2.0}}},
    ),
    (
        "speculative_draft_model_path",
        "sglang",
        "Qwen3-32B-AWQ",
        {"speculative_algorithm": "STANDALONE", "speculative_draft_model_path": "/srv/models/Qwen3-0.6B"},
    ),
    ("max_queue", "ollama", "", {"max_queue": 64}),
    ("models", "ollama", "", {"models": "/srv/models/ollama"}),
    ("sched_spread", "ollama", "", {"sched_spread": True}),
]


@pytest.mark.parametrize(("knob", "engine", "model", "knobs"), TEN, ids=[case[0] for case in TEN])
def test_a_switch_to_a_revision_with_the_knob_reaches_the_preflight(
    catalog, operator, h200s, tmp_path, monkeypatch, knob: str, engine: str, model: str, knobs: dict[str, Any]
) -> None:
    """An operator makes the revision and switches to it: the planner reads the knob, the switch is
    queued, and the host's preflight checks the plan's bytes on every GPU it uses."""
    monkeypatch.setenv("CONTROLPANEL_MODEL_DIRS", "/srv/models")
    host = _host(engine, h200s)
    variant = _ollama_model() if engine == "ollama" else ModelVariant.objects.get(name=model)
    revision = make_revision(
        host=host, engine=engine, model_variant=variant, knobs=knobs, message=f"with {knob}", actor=operator
    )
    assert knob in revision.knobs

    # The panel: the switch is asked for and queued, the planner having read every knob.
    op = switch_request(revision=revision, actor=operator)
    assert op.state == OperationState.QUEUED and op.params["planner"]["errors"] == []
    planned = revision_memory(revision).devices
    assert planned and set(planned) == {f"gpu{i}" for i in range(len(planned))}
    assert [c.name for c in panel_preflight(revision)][:3] == ["engine", "port", "weights"]

    # The host: the order the agent receives carries the plan's bytes per GPU, and its preflight
    # checks each of them against the (replayed) NVML answers before anything is stopped.
    order = Order.from_dict(operation_order(op))
    launch = order.revision
    assert launch is not None and launch.error == "" and launch.memory.devices == planned
    spec = launch_spec(launch, installs=dict(order.host.engine_installs))
    checks = host_preflight(
        launch, spec, Supervisor(tmp_path / "state"), installs={}, cpu_only=False, gpu_samples=h200s, ours=()
    )
    assert [c.name for c in checks][:3] == ["engine", "port", "weights"]
    memory = [c for c in checks if c.name == "memory"]
    assert len(memory) == len(planned) and all(c.status == "ok" for c in memory), [c.message for c in memory]


def test_data_parallel_replicas_are_planned_on_gpus_of_their_own(catalog, operator, h200s) -> None:
    """vLLM DP=2: two replicas of the whole model, so the door and the preflight count two GPUs."""
    host = _host("vllm", h200s)
    qwen = ModelVariant.objects.get(name="Qwen3-32B-AWQ")
    one = make_revision(host=host, engine="vllm", model_variant=qwen, knobs={}, message="one", actor=operator)
    two = make_revision(
        host=host, engine="vllm", model_variant=qwen, knobs={"data_parallel_size": 2}, message="dp", actor=operator
    )
    per_gpu = revision_memory(one).devices["gpu0"]
    assert revision_memory(one).devices == {"gpu0": per_gpu}
    assert revision_memory(two).devices == {"gpu0": per_gpu, "gpu1": per_gpu}


def test_every_reader_of_a_revisions_plan_gets_the_one_kept_plan(catalog, operator, h200s, monkeypatch) -> None:
    """One entry point: the door's memory, the revision page's report, the panel's preflight and the
    switch all read `revision_plan`, kept by its input, so the planner runs once for them all (the
    switch and the page once planned again on every call)."""
    host = _host("vllm", h200s)
    qwen = ModelVariant.objects.get(name="Qwen3-32B-AWQ")
    revision = make_revision(
        host=host, engine="vllm", model_variant=qwen, knobs={"max_model_len": 16384}, message="kept", actor=operator
    )
    runs: list[object] = []

    def counted(request: object) -> object:
        runs.append(request)
        return plan(request)

    monkeypatch.setattr(planning, "plan", counted)
    monkeypatch.setattr(planning, "_plans", OrderedDict())  # none kept from an earlier test
    memory = revision_memory(revision)
    report, why = report_for_revision(revision)
    assert why == "" and report is not None and memory.devices
    for _ in range(2):
        assert report_for_revision(revision) == (report, "")
        panel_preflight(revision)
    switch_request(revision=revision, actor=operator)
    assert len(runs) == 1

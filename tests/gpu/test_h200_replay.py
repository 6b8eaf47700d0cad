"""Replays of the first panel-driven GPU run (one NVIDIA H200, tests/fixtures/gpu/h200/README.md).

No GPU here: the NVML answers recorded next to a live llama-server (RecordingNvml) are served
back by ReplayNvml through the probe's own `read_samples`, and the engine's own start-up logs,
/metrics text and the benchmark's records are read by the same adapter, planner, telemetry and
energy code the panel runs. The GPU is the only thing replayed; everything else is real.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from hostagent.probes.nvml import nvml_session, read_samples
from hostagent.probes.replay import ReplayNvml, load_fixture
from hostagent.runtime.energy import integrate
from serving.engines.llamacpp import LlamaCppAdapter
from serving.planner.memory import MiB

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "gpu" / "h200"
NVML = load_fixture(FIXTURES / "nvml_live.json")
FLOW = json.loads((FIXTURES / "flow.json").read_text())
SWEEP = json.loads((FIXTURES / "flow_sweep.json").read_text())
PARTIAL = json.loads((FIXTURES / "flow_partial.json").read_text())  # a later run: r3 = -ngl 8, -fa off
ADAPTER = LlamaCppAdapter()


def startup(revision: int) -> str:
    return (FIXTURES / f"engine_startup_r{revision}.log").read_text()


def replayed(session: str, fixture: dict[str, Any] = NVML) -> list[list[Any]]:
    """The session's samples as the probe reads them again from the recorded NVML answers."""
    recorded = fixture["sessions"][session]["result"]
    rounds = recorded if isinstance(recorded[0], dict) and "gpus" in recorded[0] else [{"gpus": recorded}]
    with nvml_session(ReplayNvml.from_fixture(fixture, [session])) as lib:
        return [read_samples(lib, clock=lambda r=r: r["gpus"][0]["timestamp"]) for r in rounds]


def engine_pid(switch: int) -> int:
    return int(FLOW["switches"][switch]["result"]["pid"])


# ---- NVML next to a live engine: telemetry ingest ------------------------------------------
def test_nvml_next_to_the_live_engine_replays_to_what_the_run_read():
    rounds = replayed("benchmark")
    recorded = NVML["sessions"]["benchmark"]["result"]
    assert len(rounds) == len(recorded) == 44
    for got, want in zip(rounds, recorded, strict=True):
        assert [s.to_dict() for s in got] == want["gpus"]
    # Every round saw the engine serving r1 as the GPU's only compute process, with its memory.
    pid = engine_pid(2)
    for samples in rounds:
        (gpu,) = samples
        assert gpu.processes is not None and [p.pid for p in gpu.processes] == [pid]
        assert gpu.processes[0].used_memory_bytes > 3 * 1024**3
    busy = [s[0].power_w for s in rounds if s[0].utilization_gpu_percent]
    (idle,) = replayed("idle")[0]
    assert idle.processes == () and idle.power_w is not None and idle.power_w < 90
    # Power read while the engine is busy: well above idle, under the card's 700 W limit.
    assert max(busy) > 300 and min(busy) > idle.power_w + 50 and max(busy) < 700


@pytest.mark.django_db
def test_telemetry_ingest_stores_the_busy_engine_samples_the_host_page_shows():
    from hardware.models import GpuSample
    from hardware.services import telemetry_record
    from tests.hardware.factories import GPUFactory

    gpu = GPUFactory(index=0, name="NVIDIA H200", memory_bytes=143771 * MiB, compute_capability="9.0")
    rounds = replayed("benchmark")
    for samples in rounds:
        assert telemetry_record(host=gpu.host, samples=[s.to_dict() for s in samples]) == 1
    rows = list(GpuSample.objects.filter(gpu=gpu).order_by("ts"))
    assert len(rows) == len(rounds)
    assert [r.power_w for r in rows] == [s[0].power_w for s in rounds]
    assert all(r.mem_used_bytes and r.mem_used_bytes > 4 * 10**9 for r in rows)
    # The stored energy counter only grows, and the power it implies over the run matches the
    # instantaneous readings taken while busy (10 % apart at most).
    energy = [r.energy_mj for r in rows]
    assert energy == sorted(energy)
    span = (rows[-1].ts - rows[0].ts).total_seconds()
    from_counter = (energy[-1] - energy[0]) / 1000.0 / span
    mean_power = sum(r.power_w for r in rows) / len(rows)
    assert from_counter == pytest.approx(mean_power, rel=0.1)


# ---- tokens per joule ------------------------------------------------------------------------
@pytest.mark.parametrize("flow", [FLOW, SWEEP], ids=["quick-sweep", "long-sweep"])
def test_tokens_per_joule_from_the_recorded_counter_and_requests(flow):
    from serving.benchmarking.results import RunResult

    export = flow["benchmark"]["export"]
    results = dict(export["results"])
    by_level: dict[str, list[dict[str, Any]]] = {}
    for record in export["raw"]:
        by_level.setdefault(record["level"], []).append({k: v for k, v in record.items() if k != "level"})
    results["levels"] = [{**lv, "requests": by_level[lv["label"]]} for lv in results["levels"]]
    run = RunResult.from_dict(results)
    run.set_energy(results["energy_j"], results["avg_power_w"], results["energy_source"])
    assert results["energy_source"] == "counter"
    assert run.output_tokens == sum(lv["completed"] * lv["output_tokens_mean"] for lv in results["levels"])
    assert run.joules_per_output_token == pytest.approx(results["joules_per_output_token"])
    assert run.tokens_per_wh == pytest.approx(results["tokens_per_wh"])
    tokens_per_joule = 1 / run.joules_per_output_token
    assert 3.0 < tokens_per_joule < 5.0  # 3.9 t/J on the H200 for this f16 1B-class model


def test_the_counter_over_the_samplers_window_agrees_with_the_benchmarks_energy():
    """The flow's own 0.5 s sampler ran around the agent's benchmark: integrated the same way,
    its counter gives the same average power as the agent's meter (the windows differ a little)."""
    rounds = replayed("benchmark")
    timeline = [(s[0].timestamp, [(s[0].energy_mj, s[0].power_w or 0.0)]) for s in rounds]
    counter = integrate(timeline)
    power_only = integrate([(t, [(None, p) for _, p in gpus]) for t, gpus in timeline])
    assert counter.source == "counter" and power_only.source == "power"
    agent = FLOW["benchmark"]["export"]["results"]
    assert counter.avg_power_w == pytest.approx(agent["avg_power_w"], rel=0.1)
    assert power_only.energy_j == pytest.approx(counter.energy_j, rel=0.1)


# ---- the planner against the CUDA build's own lines and NVML -------------------------------
@pytest.fixture
def h200_revisions(tmp_path, settings, db):
    """r1 and r2 as the run recorded them, on an H200 host, the model imported from a GGUF
    with the run's header and size (tools/gpu_run/make_gguf.py --sparse: same seed, no data)."""
    from deployments.services.imports import model_variant_import_gguf
    from tests.hardware.factories import GPUFactory
    from tests.support.revisions import make_revision
    from tools.gpu_run.make_gguf import write

    facts = write(tmp_path / "rand-llama-1b-f16.gguf", "default", 17, sparse=True)
    recorded = json.loads((FIXTURES / "gguf.txt").read_text())
    assert facts["bytes"] == recorded["bytes"] and facts["params"] == recorded["params"]
    gpu = GPUFactory(index=0, name="NVIDIA H200", memory_bytes=143771 * MiB, compute_capability="9.0")
    gpu.host.model_dirs = [str(tmp_path)]  # as its agent reports CONTROLPANEL_MODEL_DIRS
    gpu.host.save()
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.create_superuser("gpu-admin", password="x")  # noqa: S106
    model = model_variant_import_gguf(path=str(tmp_path / "rand-llama-1b-f16.gguf"), actor=admin)
    revisions = []
    for rec in (FLOW["switches"][0], FLOW["switches"][1], PARTIAL["switches"][3]):
        revisions.append(
            make_revision(
                host=gpu.host,
                engine="llama.cpp",
                engine_version="b11434",
                model_variant=model,
                served_name="rand",
                port=8089,
                knobs=rec["knobs"],
                message=f"as recorded on the H200: r{rec['revision']}",
                actor=admin,
            )
        )
    return revisions


@pytest.mark.django_db
def test_planner_kv_size_equals_the_cuda_builds_llama_kv_cache_lines(h200_revisions):
    from deployments.planning import revision_plan

    for revision, number in zip(h200_revisions, (1, 2, 3), strict=True):
        report = revision_plan(revision).checked()  # log_verbosity 4 plans (it refused the switch before)
        kv = ADAPTER.parse_kv_capacity(startup(number))
        (cache,) = kv.details["caches"]
        assert "CUDA0 KV buffer size" in startup(number)
        assert report.kv_cache_bytes == kv.bytes  # 1024 MiB (r1), 4096 MiB (r2), to the byte
        assert report.kv_pool_tokens == kv.tokens == revision.knobs["ctx_size"]
        assert cache["streams"] == revision.knobs["parallel"]


@pytest.mark.django_db
def test_gpu_memory_per_process_is_what_the_planner_predicts_or_a_little_less(h200_revisions):
    """NVML's per-process figure for the engine, replayed, against the planner's weights + KV +
    CUDA context + compute buffer on the GPU. With the consumer-card context (350 MiB) the
    planner predicted 217 MiB (r1) and 250 MiB (r2) less than the H200 process held."""
    from deployments.planning import revision_plan

    for revision, session, switch in zip(h200_revisions[:2], ("serving_r1_0", "serving_r2_1"), (0, 1), strict=True):
        ((gpu,),) = replayed(session)
        (process,) = gpu.processes or ()
        assert process.pid == engine_pid(switch)
        report = revision_plan(revision).checked()
        predicted = report.weights_bytes_per_gpu + report.kv_pool_bytes_per_gpu + report.overheads_per_gpu["total"]
        assert predicted >= process.used_memory_bytes
        assert predicted <= process.used_memory_bytes * 1.06
        assert predicted <= gpu.memory_used_bytes  # the driver's own 615 MiB are on top


def test_the_cuda_builds_context_is_what_llama_cpp_calls_unaccounted():
    """llama.cpp's exit breakdown (next start-up log) splits the process: buffers + 'unaccounted'."""
    line = next(x for x in startup(2).splitlines() if "CUDA0 (H200)" in x and "unaccounted" not in x)
    total, free, self_, model, context, compute, unaccounted = map(int, re.findall(r"-?\d+", line.split("|")[2]))
    del total, free
    assert (model, context, compute) == (1501, 1024, 51)  # r1's buffers, MiB
    assert self_ == model + context + compute
    (gpu,) = replayed("serving_r1_0")[0]
    (process,) = gpu.processes or ()
    assert process.used_memory_bytes // MiB == pytest.approx(self_ + unaccounted, abs=16)
    from serving.planner.memory import llama_cuda_context

    assert llama_cuda_context([(9, 0)]) >= unaccounted * MiB
    assert llama_cuda_context([(8, 6)]) < llama_cuda_context([(9, 0)])


# ---- -ngl / -fa / -sm on a real GPU --------------------------------------------------------
@pytest.mark.django_db
def test_the_argv_the_panel_builds_is_what_ran_and_the_engine_did_what_it_says(h200_revisions):
    from deployments.runtime_bridge import engine_config_for_revision
    from serving.launch import HostFacts

    for revision, number in zip(h200_revisions[:2], (1, 2), strict=True):
        log = startup(number)
        ran = shlex.split(log.split("===== argv: ", 1)[1].splitlines()[0])
        config = engine_config_for_revision(revision, facts=HostFacts(bind_host="127.0.0.1", binary=ran[0]))
        built = list(ADAPTER.launch_spec(config).argv)
        model_at = built.index("--model") + 1
        built[model_at] = ran[model_at]  # the GGUF lived in the GPU host's model folder
        assert built == ran
        assert ran[ran.index("--n-gpu-layers") + 1] == "all" and ran[ran.index("--flash-attn") + 1] == "on"
        assert "offloaded 17/17 layers to GPU" in log
        assert re.search(r"llama_context: flash_attn\s+= enabled", log)
        assert "CUDA : ARCHS = 900" in log  # built for this host's own GPU (CMAKE_CUDA_ARCHITECTURES=native)
        assert ("--split-mode" in ran) == (number == 2)
    assert startup(2).count("using device CUDA0 (NVIDIA H200)") >= 1


def test_engine_metrics_from_the_cuda_build_count_the_benchmarks_tokens():
    idle = ADAPTER.parse_metrics((FIXTURES / "metrics_r1_idle.txt").read_text())
    after = ADAPTER.parse_metrics((FIXTURES / "metrics_r1_after_bench.txt").read_text())
    results = FLOW["benchmark"]["export"]["results"]
    generated = sum(lv["completed"] * lv["output_tokens_mean"] for lv in results["levels"])
    assert idle.generation_tokens_total is not None and after.generation_tokens_total is not None
    assert after.generation_tokens_total - idle.generation_tokens_total >= generated
    assert after.requests_running == 0


# ---- the figures the closing note quotes -----------------------------------------------------
def test_the_recorded_figures_hold_together():
    build = json.loads((FIXTURES / "build.json").read_text())
    assert build["ok"] and build["version"] == "11434.0.0" and "libggml-cuda.so" in build["ggml_libraries"]
    assert "-DCMAKE_CUDA_ARCHITECTURES=native" in build["steps"][-1]["env"]["CMAKE_ARGS"]
    assert build["seconds"] < 600
    for switch in FLOW["switches"]:
        assert switch["state"] == "succeeded" and switch["seconds"] < 5
    levels = SWEEP["benchmark"]["export"]["results"]["levels"]
    decode = [lv["output_tokens_per_s"] for lv in levels]
    assert [lv["concurrency"] for lv in levels] == [1, 2, 4, 8, 16]
    assert decode == sorted(decode) and decode[0] > 500  # aggregate decode grows with concurrency
    assert all(lv["failed"] == 0 for lv in levels)


def test_the_benchmarks_engine_delta_counts_counters_not_gauges():
    """The run's own export held `llamacpp:predicted_tokens_seconds: -447.9` (after - before of a
    rate gauge): a "negative tokens/s" in the benchmark's engine figures. Counters only now."""
    from serving.benchmarking import stats

    recorded = FLOW["benchmark"]["export"]["results"]["engine_metrics_delta"]
    assert recorded["llamacpp:predicted_tokens_seconds"] < 0  # what the old delta said
    before = stats.parse_prometheus_samples((FIXTURES / "metrics_r1_idle.txt").read_text())
    after = stats.parse_prometheus_samples((FIXTURES / "metrics_r1_after_bench.txt").read_text())
    delta = stats.metrics_delta(before, after)
    assert "llamacpp:predicted_tokens_seconds" not in delta and "llamacpp:requests_processing" not in delta
    assert all(v >= 0 for v in delta.values())
    generated = sum(
        lv["completed"] * lv["output_tokens_mean"] for lv in FLOW["benchmark"]["export"]["results"]["levels"]
    )
    assert delta["llamacpp:tokens_predicted_total"] >= generated


@pytest.mark.django_db
def test_partial_offload_plans_what_llama_cpp_put_on_the_gpu(h200_revisions):
    """-ngl 8 of 16 blocks, -fa off, on the H200: llama.cpp counts the output layer as one of the
    8 ("offloaded 8/17"), so 7 blocks' KV went to CUDA0 (112 MiB; the planner said 8/16 = 128),
    and the attention scores of -fa off grew the compute buffer to 117 MiB (the planner said 48)."""
    from deployments.planning import revision_plan

    r3 = h200_revisions[2]
    log = startup(3)
    ran = shlex.split(log.split("===== argv: ", 1)[1].splitlines()[0])
    assert ran[ran.index("--n-gpu-layers") + 1] == "8" and ran[ran.index("--flash-attn") + 1] == "off"
    assert "offloaded 8/17 layers to GPU" in log
    cuda_kv = float(re.search(r"CUDA0 KV buffer size =\s+([\d.]+) MiB", log).group(1))  # type: ignore[union-attr]
    cuda_compute = float(re.search(r"CUDA0 compute buffer size =\s+([\d.]+) MiB", log).group(1))  # type: ignore[union-attr]
    report = revision_plan(r3).checked()
    assert report.kv_cache_bytes == ADAPTER.parse_kv_capacity(log).bytes  # 256 MiB, CPU and GPU together
    assert report.kv_pool_bytes_per_gpu == cuda_kv * MiB  # 112 MiB
    assert report.overheads_per_gpu["compute_buffer"] == pytest.approx(cuda_compute * MiB, rel=0.1)
    nvml = load_fixture(FIXTURES / "nvml_live_partial.json")
    ((gpu,),) = replayed("serving_r3_3", nvml)
    (process,) = gpu.processes or ()
    assert process.pid == int(PARTIAL["switches"][3]["result"]["pid"])
    predicted = report.weights_bytes_per_gpu + report.kv_pool_bytes_per_gpu + report.overheads_per_gpu["total"]
    assert process.used_memory_bytes <= predicted <= process.used_memory_bytes * 1.06

"""The NVML probe, fed NVML answers recorded on a real NVIDIA H200.

There is no GPU where these tests run. ``tests/fixtures/nvml/h200_x1.json`` holds the raw
pynvml answers recorded by ``tools/record_nvml.py`` on the ``device`` tool's one-GPU H200
machine (its ``metadata`` and the README beside it say where and when), and
``ReplayNvml`` serves them back through the same calls the probe makes.
"""

from __future__ import annotations

import copy
import ctypes.util
import json
import sys
from datetime import datetime
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from hostagent.probes.nvml import (
    NvmlUnavailable,
    nvml_session,
    probe_host_gpus,
    read_samples,
    sample_gpus,
)
from hostagent.probes.replay import NVMLError, ReplayNvml, load_fixture

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"
GIB = 2**30


@pytest.fixture(scope="module")
def h200_x1() -> dict[str, Any]:
    return load_fixture(FIXTURES / "h200_x1.json")


def _series(replay: ReplayNvml, ticks: int) -> list[Any]:
    with nvml_session(replay) as lib:
        return [read_samples(lib)[0] for _ in range(ticks)]


def test_fixture_says_where_and_when_it_was_recorded(h200_x1: dict[str, Any]) -> None:
    meta = h200_x1["metadata"]
    assert meta["machine_kind"] == "nvidia-h200"
    assert datetime.fromisoformat(meta["recorded_at"]).tzinfo is not None
    assert meta["driver"] == "580.159.04"
    assert meta["nvidia_ml_py"]
    assert "tools/record_nvml.py" in meta["command"]


def test_h200_inventory(h200_x1: dict[str, Any]) -> None:
    inventory = probe_host_gpus(ReplayNvml.from_fixture(h200_x1, ["inventory_idle"]))

    assert inventory.available and inventory.reason == ""
    assert inventory.driver_version == "580.159.04"
    assert inventory.cuda_driver_version == "13.0"  # NVML says 13000
    assert inventory.nvml_version == "13.580.159.04"
    (gpu,) = inventory.gpus
    assert gpu.index == 0
    assert gpu.name == "NVIDIA H200"
    assert gpu.uuid.startswith("GPU-")
    assert gpu.compute_capability == (9, 0)
    assert 139 < gpu.memory_total_bytes / GIB < 142
    assert (gpu.pcie.max_generation, gpu.pcie.max_width) == (5, 16)
    assert (gpu.pcie.current_generation, gpu.pcie.current_width) == (5, 16)
    assert gpu.power_limit_w == 700.0  # NVML says 700000 mW
    assert gpu.pci_bus_id == "00000000:00:06.0"
    assert gpu.serial
    assert (gpu.brand, gpu.architecture) == ("NVIDIA", "Hopper")
    assert gpu.nvlink_active_links == 0
    assert "nvlink" in gpu.unsupported
    assert gpu.errors == ()
    assert inventory.pairs == ()  # one GPU: no pairs to ask about


@pytest.mark.parametrize("session", ["inventory_idle", "inventory_load"])
def test_replay_gives_what_the_probe_gave_on_the_gpu(h200_x1: dict[str, Any], session: str) -> None:
    inventory = probe_host_gpus(ReplayNvml.from_fixture(h200_x1, [session]))

    assert inventory.to_dict() == h200_x1["sessions"][session]["result"]
    json.dumps(inventory.to_dict())  # JSON-ready for Celery and the database


def test_energy_counter_rises_under_load_and_matches_power(h200_x1: dict[str, Any]) -> None:
    recorded = h200_x1["sessions"]["telemetry_load"]
    samples = _series(ReplayNvml.from_fixture(h200_x1, ["telemetry_load"]), len(recorded["result"]))

    energies = [s.energy_mj for s in samples]
    assert len(samples) == 20
    assert all(b > a for a, b in zip(energies, energies[1:], strict=False))
    # Power is in watts, not milliwatts: a loaded H200 draws near its 700 W limit.
    powers = [s.power_w for s in samples]
    assert all(p is not None and 400 < p <= 720 for p in powers)
    # The energy counter (mJ) over the recorded wall time agrees with the power readings.
    times = [c["t"] for c in recorded["calls"] if c["fn"] == "nvmlDeviceGetTotalEnergyConsumption"]
    watts_from_energy = (energies[-1] - energies[0]) / 1000 / (times[-1] - times[0])
    assert watts_from_energy == pytest.approx(mean(powers), rel=0.1)


def test_load_series_shows_a_busy_gpu_and_its_process(h200_x1: dict[str, Any]) -> None:
    idle = _series(ReplayNvml.from_fixture(h200_x1, ["telemetry_idle"]), 8)
    loaded = _series(ReplayNvml.from_fixture(h200_x1, ["telemetry_load"]), 20)

    assert max(s.utilization_gpu_percent or 0 for s in idle) == 0
    assert min(s.utilization_gpu_percent or 0 for s in loaded) >= 90
    assert min(s.power_w or 0 for s in loaded) > max(s.power_w or 0 for s in idle) + 300
    assert all(s.sm_clock_mhz and s.memory_clock_mhz for s in loaded)
    assert all(s.temperature_c and 20 < s.temperature_c < 95 for s in loaded)
    assert all(s.memory_used_bytes and s.memory_used_bytes < s.memory_total_bytes for s in loaded)
    assert idle[0].processes == ()
    (proc,) = loaded[0].processes or ()
    assert proc.pid > 0 and proc.used_memory_bytes and proc.used_memory_bytes > 0


def test_passively_cooled_h200_has_no_fan_reading(h200_x1: dict[str, Any]) -> None:
    (sample,) = sample_gpus(ReplayNvml.from_fixture(h200_x1, ["telemetry_idle"]))

    assert sample.fan_percent is None
    assert sample.unsupported == frozenset({"fan_percent"})
    assert sample.energy_mj is not None and sample.power_w is not None


def test_unsupported_energy_and_fan_become_none_and_are_named(h200_x1: dict[str, Any]) -> None:
    replay = ReplayNvml.from_fixture(h200_x1, ["telemetry_load"])
    replay.fail("nvmlDeviceGetTotalEnergyConsumption", "NotSupported")  # as on Pascal or a vGPU
    replay.fail("nvmlDeviceGetFanSpeed", "NotSupported")

    (sample,) = sample_gpus(replay)

    assert sample.energy_mj is None and sample.fan_percent is None
    assert {"energy_mj", "fan_percent"} <= sample.unsupported
    assert sample.errors == ()
    assert sample.power_w and sample.power_w > 400  # the rest still arrives


def test_a_failing_query_is_an_error_not_unsupported(h200_x1: dict[str, Any]) -> None:
    replay = ReplayNvml.from_fixture(h200_x1, ["inventory_idle"])
    replay.fail("nvmlDeviceGetEnforcedPowerLimit", "NoPermission")

    (gpu,) = probe_host_gpus(replay).gpus

    assert gpu.power_limit_w is None
    assert ("power_limit_w", "NoPermission") in gpu.errors
    assert "power_limit_w" not in gpu.unsupported
    assert gpu.name == "NVIDIA H200"


def test_a_lost_gpu_is_reported_and_the_probe_goes_on(h200_x1: dict[str, Any]) -> None:
    replay = ReplayNvml.from_fixture(h200_x1, ["inventory_idle"])
    replay.fail("nvmlDeviceGetUUID", "GpuIsLost")

    inventory = probe_host_gpus(replay)

    assert inventory.available and inventory.gpus == ()
    assert inventory.errors == (("gpu 0", "GpuIsLost"),)
    assert inventory.driver_version == "580.159.04"


def test_pair_queries_on_a_two_gpu_view_built_from_the_h200_recording(h200_x1: dict[str, Any]) -> None:
    """No two-GPU machine was lent, so this view is derived, not recorded: GPU 1 answers
    as GPU 0 did, and the pair (0, 1) gets the driver's recorded self-pair answers
    (P2P status 5 for every index, topology NotSupported)."""
    replay = ReplayNvml(_two_gpu_calls(h200_x1), functions=h200_x1["nvml"]["functions"])

    inventory = probe_host_gpus(replay)

    assert [g.index for g in inventory.gpus] == [0, 1]
    (pair,) = inventory.pairs
    assert (pair.a, pair.b) == (0, 1)
    assert (pair.p2p.read, pair.p2p.write, pair.p2p.nvlink, pair.p2p.atomics) == ("not_supported",) * 4
    assert pair.topology is None and pair.unsupported == frozenset({"topology"})


def test_cpu_only_host_without_nvidia_ml_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail

    inventory = probe_host_gpus()

    assert inventory.available is False
    assert "nvidia-ml-py" in inventory.reason
    assert inventory.gpus == ()
    assert sample_gpus() == []


@pytest.mark.parametrize("error", ["LibraryNotFound", "DriverNotLoaded"])
def test_cpu_only_host_without_driver(error: str) -> None:
    inventory = probe_host_gpus(ReplayNvml.without_driver(error))

    assert inventory.available is False
    assert error in inventory.reason
    assert inventory.gpus == () and inventory.pairs == ()
    assert sample_gpus(ReplayNvml.without_driver(error)) == []


@pytest.mark.skipif(bool(ctypes.util.find_library("nvidia-ml")), reason="this host has an NVIDIA driver")
def test_this_machine_without_a_driver_is_cpu_only() -> None:
    inventory = probe_host_gpus()  # the real pynvml, with no libnvidia-ml.so here

    assert inventory.available is False
    assert "LibraryNotFound" in inventory.reason


def test_a_broken_driver_is_a_fault_not_a_cpu_only_host() -> None:
    with pytest.raises(NVMLError), nvml_session(ReplayNvml.without_driver("LibRmVersionMismatch")):
        pass
    with pytest.raises(NvmlUnavailable), nvml_session(ReplayNvml.without_driver("DriverNotLoaded")):
        pass


def test_demo_replay_loops_the_series_without_running_dry(h200_x1: dict[str, Any]) -> None:
    replay = ReplayNvml.from_fixture(h200_x1, ["telemetry_load"], loop=True)

    samples = _series(replay, 45)

    assert len(samples) == 45
    assert samples[20].energy_mj == samples[0].energy_mj  # started over after 20


def _two_gpu_calls(fixture: dict[str, Any]) -> list[dict[str, Any]]:
    calls = []
    for call in fixture["sessions"]["inventory_idle"]["calls"]:
        if call["fn"] == "nvmlDeviceGetCount":
            calls.append({**call, "result": 2})
            continue
        calls.append(call)
        twin = json.loads(json.dumps(call).replace('{"gpu": 0}', '{"gpu": 1}'))
        if call["fn"] == "nvmlDeviceGetHandleByIndex":
            twin["args"], twin["result"] = [1], {"gpu": 1}
        if twin != call:
            calls.append(twin)
    for call in fixture["sessions"]["self_pair"]["calls"]:
        if call["fn"] in ("nvmlDeviceGetP2PStatus", "nvmlDeviceGetTopologyCommonAncestor"):
            pair = copy.deepcopy(call)
            pair["args"][1] = {"gpu": 1}
            calls.append(pair)
    return calls

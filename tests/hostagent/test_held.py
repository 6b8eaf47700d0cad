"""What the agent says each engine holds, found the way its telemetry loop finds them: the host's
own engine and the front door's on-demand ones (their state folders), by revision, with real
processes of this machine; GPU figures from a GPU sample as NVML gives them (no GPU here)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hostagent.held import ONDEMAND_DIR, host_memory_report, process_name
from hostagent.probes.nvml import GpuProcess, GpuSample
from hostagent.runtime.state import EngineRecord
from hostagent.runtime.supervisor import Supervisor


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[Supervisor, dict[str, int]]]:
    """The host's supervisor with r3 as its engine and r7 loaded on demand: two real processes,
    each in a process group of its own (as the supervisor starts engines)."""
    host = Supervisor(tmp_path / "host")
    procs = {}
    for revision_id, sup in (("3", host), ("7", Supervisor(tmp_path / "host" / ONDEMAND_DIR / "r7"))):
        proc = subprocess.Popen(  # a process holding some memory, standing in for an engine
            [sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(60)"], start_new_session=True
        )
        procs[revision_id] = proc
        sup.state.write_engine(
            EngineRecord(
                pid=proc.pid, pgid=proc.pid, start_ticks=0, engine="llama.cpp", revision_label=f"r{revision_id}",
                revision_id=revision_id, served_name="m", host="127.0.0.1", port=0, argv=[], env_keys=[],
                health_url="", models_url="", chat_url="", metrics_url=None, log_path="", log_offset=0,
                started_at="2026-12-04T00:00:00+00:00",
            )
        )  # fmt: skip
    try:
        yield host, {rid: p.pid for rid, p in procs.items()}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_on_a_cpu_host_each_engine_reports_its_resident_memory_by_revision(engines) -> None:
    host, pids = engines
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until both have touched their 64 MiB
        report = host_memory_report(host, None)
        ram = {e.revision_id: e.devices["ram"] for e in report.engines}
        if len(ram) == 2 and min(ram.values()) > 64 << 20:
            break
        time.sleep(0.1)
    assert set(ram) == {"3", "7"} and min(ram.values()) > 64 << 20
    assert report.outside == ()  # a CPU host lists no GPU holders


def test_on_a_gpu_host_the_panels_engines_are_counted_and_anyone_else_is_named(engines) -> None:
    host, pids = engines
    stranger = 999_999_999  # no such process here: named "?"
    sample = GpuSample(
        index=0, uuid=None, timestamp=0.0, utilization_gpu_percent=None, utilization_memory_percent=None,
        memory_used_bytes=None, memory_total_bytes=None, power_w=None, temperature_c=None, sm_clock_mhz=None,
        memory_clock_mhz=None, energy_mj=None, fan_percent=None, unsupported=frozenset(), errors=(),
        processes=(GpuProcess(pids["3"], 5 << 30), GpuProcess(pids["7"], 3 << 30), GpuProcess(stranger, 2 << 30)),
    )  # fmt: skip
    report = host_memory_report(host, [sample])
    held = {e.revision_id: e.devices for e in report.engines}
    assert held == {"3": {"gpu0": 5 << 30}, "7": {"gpu0": 3 << 30}}
    assert [o.to_dict() for o in report.outside] == [{"pid": stranger, "name": "?", "gpu": 0, "bytes": 2 << 30}]
    assert process_name(pids["3"]) == Path(sys.executable).name[:15]

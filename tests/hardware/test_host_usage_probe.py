"""The host's CPU and memory from /proc (hostagent.probes.host_usage): this machine's own /proc
read for real, and a GPU host's /proc recorded (tests/fixtures/proc/) giving figures worked out
by hand. No database."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hostagent.probes.host_usage import (
    CpuTimes,
    HostUsageSampler,
    cpu_percent,
    host_usage,
    parse_cpu_times,
    parse_meminfo,
)

PROC = Path("/proc")
H200 = Path(__file__).resolve().parent.parent / "fixtures" / "proc" / "h200-x1"
GIB = 1024**3
linux_only = pytest.mark.skipif(not (PROC / "stat").exists(), reason="no /proc here")


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@linux_only
def test_this_machines_proc_gives_plausible_figures() -> None:
    sampler = HostUsageSampler()
    _spin(0.3)  # this process keeps a core busy: the share cannot be 0
    usage = sampler.sample()
    assert usage is not None
    assert usage.cpu_percent is not None and 0 < usage.cpu_percent <= 100
    assert abs(usage.timestamp - time.time()) < 5
    # The total as the kernel tells it another way (sysconf: total RAM pages)
    assert usage.memory_total_bytes == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert usage.memory_available_bytes is not None
    assert 0 < usage.memory_available_bytes <= usage.memory_total_bytes
    assert usage.swap_total_bytes is not None and usage.swap_used_bytes is not None
    assert 0 <= usage.swap_used_bytes <= usage.swap_total_bytes
    loads = (usage.load_1, usage.load_5, usage.load_15)
    assert all(load is not None and 0 <= load < 10_000 for load in loads)
    assert usage.load_1 == pytest.approx(os.getloadavg()[0], abs=2.0)


@linux_only
def test_cpu_share_comes_from_two_readings_of_proc_stat() -> None:
    before = parse_cpu_times((PROC / "stat").read_text())
    _spin(0.3)
    after = parse_cpu_times((PROC / "stat").read_text())
    assert before is not None and after is not None
    assert after.total > before.total and after.busy > before.busy  # ticks passed, some of them ours
    share = cpu_percent(before, after)
    assert share == pytest.approx(100 * (after.busy - before.busy) / (after.total - before.total))
    assert 0 < share <= 100
    # Each sample covers the time since the previous one: a second sample right away is its own
    sampler = HostUsageSampler()
    first, second = sampler.sample(), sampler.sample()
    assert first is not None and second is not None and second.timestamp >= first.timestamp


def test_a_recorded_gpu_host_gives_the_figures_worked_out_by_hand() -> None:
    """The H200 host, four of 16 cores busy between the readings:
    before: cpu 89 0 456 41187 88 0 15 4 0 0 -> total 41839, idle+iowait 41275
    after:  cpu 889 0 458 43591 88 0 16 4 0 0 -> total 45046, idle+iowait 43679
    busy 803 of 3207 ticks; MemTotal 131961976 kB, MemAvailable 131475832 kB, no swap."""
    before = parse_cpu_times((H200 / "stat_before").read_text())
    after = parse_cpu_times((H200 / "stat_after").read_text())
    assert before == CpuTimes(busy=564, total=41839) and after == CpuTimes(busy=1367, total=45046)
    usage = host_usage(
        before=before,
        after=after,
        meminfo=(H200 / "meminfo").read_text(),
        loadavg=(H200 / "loadavg").read_text(),
        timestamp=1_796_405_827.0,
    )
    assert usage is not None
    assert usage.cpu_percent == pytest.approx(100 * 803 / 3207)  # 25.04 %: 4 of 16 cores
    assert usage.memory_total_bytes == 131961976 * 1024 == 135_129_063_424
    assert usage.memory_available_bytes == 131475832 * 1024
    assert (usage.swap_total_bytes, usage.swap_used_bytes) == (0, 0)
    assert (usage.load_1, usage.load_5, usage.load_15) == (0.0, 0.0, 0.0)
    assert usage.to_dict()["cpu_percent"] == usage.cpu_percent


def test_swap_in_use_and_a_kernel_without_memavailable() -> None:
    meminfo = (
        "MemTotal:       16384000 kB\nMemFree:         1024000 kB\nBuffers:          512000 kB\n"
        "Cached:          2048000 kB\nSwapTotal:       8192000 kB\nSwapFree:        6144000 kB\n"
    )
    assert parse_meminfo(meminfo)["Cached"] == 2048000 * 1024
    usage = host_usage(before=None, after=None, meminfo=meminfo, loadavg="3.50 2.25 1.00 4/812 9999\n", timestamp=1.0)
    assert usage is not None and usage.cpu_percent is None  # one reading says nothing of a share
    assert usage.memory_available_bytes == (1024000 + 512000 + 2048000) * 1024  # free + buffers + cache
    assert usage.swap_used_bytes == 2048000 * 1024
    assert (usage.load_1, usage.load_5, usage.load_15) == (3.5, 2.25, 1.0)


def test_counters_that_went_back_or_did_not_move_give_no_share() -> None:
    assert cpu_percent(CpuTimes(busy=10, total=100), CpuTimes(busy=10, total=100)) is None
    assert cpu_percent(CpuTimes(busy=500, total=9000), CpuTimes(busy=20, total=200)) is None  # a reboot between
    assert cpu_percent(CpuTimes(busy=0, total=0), CpuTimes(busy=50, total=100)) == 50.0
    assert parse_cpu_times("cpu0 1 2 3 4\n") is None and parse_cpu_times("cpu  x y z\n") is None


def test_a_machine_without_proc_has_no_sample(tmp_path: Path) -> None:
    assert HostUsageSampler(proc=tmp_path).sample() is None

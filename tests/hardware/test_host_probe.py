"""Host facts, read on this very machine and from files recorded on the lent H200 machine."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import pytest

from hostagent.probes.host import (
    parse_cpu_model,
    parse_mem_total,
    parse_os_release,
    parse_physical_cores,
    probe_host,
)
from hostagent.probes.replay import load_fixture

H200_X1 = Path(__file__).resolve().parent.parent / "fixtures" / "nvml" / "h200_x1.json"


def test_this_machine() -> None:
    facts = probe_host()

    assert facts.hostname
    assert facts.os_name.strip()
    assert facts.kernel == platform.release()
    assert facts.architecture
    assert facts.cpu_logical_cores > 0
    assert 0 < facts.cpu_usable_cores <= facts.cpu_logical_cores
    assert facts.cpu_physical_cores is None or 0 < facts.cpu_physical_cores <= facts.cpu_logical_cores
    assert facts.memory_total_bytes and facts.memory_total_bytes > 0
    assert facts.to_dict()["hostname"] == facts.hostname


@pytest.mark.skipif(not hasattr(os, "sysconf"), reason="needs POSIX sysconf")
def test_ram_agrees_with_the_kernel_page_count() -> None:
    expected = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")

    assert probe_host().memory_total_bytes == pytest.approx(expected, rel=0.01)


def test_files_recorded_on_the_h200_machine_parse_as_they_did_there() -> None:
    host = load_fixture(H200_X1)["host"]
    raw, there = host["raw"], host["probe"]

    assert parse_cpu_model(raw["cpuinfo"]) == there["cpu_model"] == "Intel(R) Xeon(R) Processor"
    assert parse_physical_cores(raw["cpuinfo"]) == there["cpu_physical_cores"] == 16
    assert parse_mem_total(raw["meminfo"]) == there["memory_total_bytes"]
    assert 120 < there["memory_total_bytes"] / 2**30 < 130  # "128 GiB memory"
    assert parse_os_release(raw["os_release"]) == there["os_name"] == "Ubuntu 24.04.3 LTS"


def test_missing_proc_files_give_unknowns_not_a_crash(tmp_path: Path) -> None:
    facts = probe_host(proc=tmp_path, os_release=[tmp_path / "os-release"])

    assert facts.memory_total_bytes is None
    assert facts.cpu_physical_cores is None
    assert facts.cpu_logical_cores > 0
    assert facts.os_name.strip()  # falls back to the platform's name


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n',
            "Debian GNU/Linux 12 (bookworm)",
        ),
        ('NAME="Rocky Linux"\nVERSION="9.4 (Blue Onyx)"\n', "Rocky Linux 9.4 (Blue Onyx)"),
        ("# nothing useful\n", None),
    ],
)
def test_os_release_names(text: str, expected: str | None) -> None:
    assert parse_os_release(text) == expected

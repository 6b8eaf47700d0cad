"""The energy meter as it measured a real H200 under load (tests/fixtures/nvml/h200_energy.json,
recorded with tools/record_energy.py on the lent GPU machine): the NVML energy counter and the
power-integration fallback must agree, or a benchmark's joules per token would depend on the GPU
generation instead of the work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

RECORDING = json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "nvml" / "h200_energy.json").read_text())


def test_the_recording_says_where_it_comes_from():
    assert RECORDING["machine_kind"] == "nvidia-h200" and RECORDING["gpus"] == ["NVIDIA H200"]
    assert RECORDING["recorded_at"].startswith("2026-")


def test_counter_and_power_integration_agree_on_a_real_gpu():
    counter, power = RECORDING["readings"]["counter"], RECORDING["readings"]["power"]
    assert counter["source"] == "counter" and power["source"] == "power"
    assert counter["error"] is None and power["error"] is None
    assert counter["energy_j"] == pytest.approx(power["energy_j"], rel=0.05)
    # A loaded H200 (700 W limit) draws hundreds of watts: energy is in joules, power in watts.
    assert 300 < counter["avg_power_w"] <= 700
    assert counter["energy_j"] == pytest.approx(counter["avg_power_w"] * counter["duration_s"], rel=0.01)

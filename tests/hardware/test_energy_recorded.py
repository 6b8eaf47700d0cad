"""The energy meter's maths on samples recorded from a real H200 (tests/fixtures/nvml/h200_energy.json,
tools/record_energy.py on the lent GPU machine; see the README there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hostagent.runtime.energy import integrate

RECORDING = json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "nvml" / "h200_energy.json").read_text())


def timeline(name: str, *, drop_counter: bool = False) -> list:
    return [
        (t, [(None if drop_counter else energy, power) for energy, power in gpus])
        for t, gpus in RECORDING["readings"][name]["timeline"]
    ]


def test_replaying_the_recorded_samples_gives_what_the_meter_reported_on_the_gpu():
    for name in ("counter", "power"):
        replayed = integrate(timeline(name))
        recorded = RECORDING["readings"][name]
        assert replayed.source == recorded["source"] == name
        assert replayed.energy_j == pytest.approx(recorded["energy_j"])
        assert replayed.avg_power_w == pytest.approx(recorded["avg_power_w"])


def test_the_counter_wins_where_power_readings_lag_a_load_change():
    counter = integrate(timeline("counter"))
    integrated = integrate(timeline("counter", drop_counter=True))
    assert counter.source == "counter" and integrated.source == "power"
    # The load ramped up inside this window: averaged power readings lag, so integration reads low.
    assert integrated.energy_j < counter.energy_j
    assert integrated.energy_j == pytest.approx(counter.energy_j, rel=0.2)


def test_steady_load_reads_as_watts_near_the_h200_limit():
    steady = integrate(timeline("power"))
    assert 600 < steady.avg_power_w <= 700  # W, not mW; a 700 W card busy with bf16 matmuls
    assert steady.energy_j == pytest.approx(steady.avg_power_w * steady.duration_s, rel=0.01)

"""GPU energy over a benchmark run.

`NvmlEnergyMeter` takes a `sampler` callable (the NVML probe supplies it) that returns one
`(energy_mj or None, power_w)` tuple per GPU, and samples it on a background thread every
0.2 s. Per GPU it prefers the driver's energy counter (`nvmlDeviceGetTotalEnergyConsumption`,
mJ since the driver loaded, Volta+) and falls back to trapezoid integration of the power
samples. `NullMeter` is for CPU-only hosts: energy unknown (None), never 0.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

GpuSample = tuple[float | None, float]  # (energy counter in mJ or None, power in W)
Sampler = Callable[[], Sequence[GpuSample]]


@dataclass(frozen=True)
class EnergyReading:
    energy_j: float | None  # all GPUs together; None = unknown
    avg_power_w: float | None
    duration_s: float
    source: str | None  # "counter" (every GPU had one), "power" (any GPU integrated), None
    samples: int = 0
    per_gpu_j: tuple[float | None, ...] = field(default_factory=tuple)
    error: str | None = None


class EnergyMeter(Protocol):
    def start(self) -> None: ...

    def stop(self) -> EnergyReading: ...


class NullMeter:
    """No GPU energy on this host."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = self._clock()

    def stop(self) -> EnergyReading:
        return EnergyReading(energy_j=None, avg_power_w=None, duration_s=self._clock() - self._t0, source=None)


def trapezoid_j(points: Sequence[tuple[float, float]]) -> float | None:
    """Energy in J from (time s, power W) points by the trapezoid rule; None with < 2 points."""
    if len(points) < 2:
        return None
    total = 0.0
    for (t0, p0), (t1, p1) in zip(points, points[1:], strict=False):
        total += (t1 - t0) * (p0 + p1) / 2.0
    return total


def counter_j(first_mj: float | None, last_mj: float | None) -> float | None:
    """Energy in J from two counter reads; None when either is missing or it went backwards
    (driver reload or wrap)."""
    if first_mj is None or last_mj is None or last_mj < first_mj:
        return None
    return (last_mj - first_mj) / 1000.0


def integrate(timeline: Sequence[tuple[float, Sequence[GpuSample]]]) -> EnergyReading:
    """Sum energy over GPUs from a timeline of (time, per-GPU samples)."""
    if len(timeline) < 2:
        return EnergyReading(energy_j=None, avg_power_w=None, duration_s=0.0, source=None, samples=len(timeline))
    duration = timeline[-1][0] - timeline[0][0]
    n_gpus = min(len(samples) for _, samples in timeline)
    per_gpu: list[float | None] = []
    used_power = False
    for i in range(n_gpus):
        energy = counter_j(timeline[0][1][i][0], timeline[-1][1][i][0])
        if energy is None:
            energy = trapezoid_j([(t, samples[i][1]) for t, samples in timeline])
            used_power = True
        per_gpu.append(energy)
    if not per_gpu or any(e is None for e in per_gpu):
        return EnergyReading(None, None, duration, None, len(timeline), tuple(per_gpu))
    total = sum(e for e in per_gpu if e is not None)
    return EnergyReading(
        energy_j=total,
        avg_power_w=total / duration if duration > 0 else None,
        duration_s=duration,
        source="power" if used_power else "counter",
        samples=len(timeline),
        per_gpu_j=tuple(per_gpu),
    )


class NvmlEnergyMeter:
    """Samples `sampler` every `interval_s` on a daemon thread between start() and stop()."""

    def __init__(
        self, sampler: Sampler, *, interval_s: float = 0.2, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._sampler = sampler
        self._interval = interval_s
        self._clock = clock
        self._timeline: list[tuple[float, Sequence[GpuSample]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None

    def _sample(self) -> None:
        try:
            samples = list(self._sampler())
        except Exception as exc:  # a failing probe makes energy unknown, never wrong
            self._error = f"{type(exc).__name__}: {exc}"
            self._stop.set()
            return
        self._timeline.append((self._clock(), samples))

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def start(self) -> None:
        self._timeline = []
        self._error = None
        self._stop.clear()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="energy-meter", daemon=True)
        self._thread.start()

    def stop(self) -> EnergyReading:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._error is None:
            self._sample()  # the closing sample, at the stop time
        if self._error is not None:
            duration = self._timeline[-1][0] - self._timeline[0][0] if len(self._timeline) > 1 else 0.0
            return EnergyReading(None, None, duration, None, len(self._timeline), error=self._error)
        return integrate(self._timeline)

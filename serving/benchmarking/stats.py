"""Benchmark maths: streamed chunks in, latencies and throughputs out.

Pure (no Django, no I/O). Definitions follow `vllm bench serve`
(`vllm/benchmarks/lib/endpoint_request_func.py`, `vllm/benchmarks/serve.py calculate_metrics`):

- an *output chunk* is a streamed chunk whose `delta` carries `content`, `reasoning`
  (or `reasoning_content`), `tool_calls` or `function_call`, or has `content == ""` and no `role`;
- TTFT = first output chunk - request start; ITL = gap between consecutive output chunks
  (per chunk, so spec decoding gives fewer, larger gaps); E2EL = last output chunk - start;
- the usage chunk (no `choices`, with `usage`) gives the token counts and does *not* extend E2EL;
- TPOT = (E2EL - TTFT) / (output_tokens - 1) when output_tokens > 1;
- a request succeeds only if it received at least one output chunk.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile with linear interpolation (numpy's default, as vLLM uses)."""
    if not values:
        return None
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within 0..100, got {p}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return float(ordered[low])
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


def summarize(values: Sequence[float]) -> dict[str, float | None]:
    """{mean, p50, p90, p99}; every value None when there is nothing to summarise."""
    if not values:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    out: dict[str, float | None] = {"mean": sum(values) / len(values)}
    for p in PERCENTILES:
        out[f"p{p}"] = percentile(values, p)
    return out


def is_output_chunk(chunk: Mapping[str, Any]) -> bool:
    """True when a chat-completions stream chunk carries generated output (§8)."""
    choices = chunk.get("choices") or []
    if not choices:
        return False
    choice = choices[0] or {}
    delta = choice.get("delta")
    if delta is None:  # /v1/completions streams `text`
        return bool(choice.get("text"))
    for key in ("content", "reasoning", "reasoning_content", "tool_calls", "function_call"):
        if delta.get(key):
            return True
    return delta.get("content") == "" and "role" not in delta


@dataclass
class StreamTimer:
    """Accumulates one streamed request. Feed it every parsed chunk with its receive time.

    Times are seconds on one monotonic clock (`time.perf_counter()`); `start` is taken just
    before the request is sent.
    """

    start: float
    first_output: float | None = None
    last_output: float | None = None
    itl: list[float] = field(default_factory=list)
    output_chunks: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    server_timings: dict[str, Any] | None = None

    def feed(self, chunk: Mapping[str, Any], now: float) -> None:
        if is_output_chunk(chunk):
            if self.first_output is None:
                self.first_output = now
            else:
                self.itl.append(now - (self.last_output or now))
            self.last_output = now
            self.output_chunks += 1
        usage = chunk.get("usage")
        if usage:  # the usage chunk never moves the end time
            if usage.get("completion_tokens") is not None:
                self.completion_tokens = int(usage["completion_tokens"])
            if usage.get("prompt_tokens") is not None:
                self.prompt_tokens = int(usage["prompt_tokens"])
        timings = chunk.get("timings")  # llama.cpp's own clock, on the last chunks
        if isinstance(timings, Mapping):
            self.server_timings = dict(timings)

    @property
    def ok(self) -> bool:
        return self.output_chunks > 0

    @property
    def ttft(self) -> float | None:
        return None if self.first_output is None else self.first_output - self.start

    @property
    def e2e(self) -> float | None:
        return None if self.last_output is None else self.last_output - self.start

    @property
    def output_tokens(self) -> int:
        """Usage when the server sent it; else one token per output chunk (a lower bound)."""
        return self.completion_tokens if self.completion_tokens is not None else self.output_chunks


def engine_decode_rate(timings: Mapping[str, Any] | None) -> float | None:
    """Decode tokens/s by the engine's own clock: llama.cpp's `timings.predicted_per_second` (its
    tokens after the first over the time from the first to the last, as the panel's TPOT counts
    them); None without timings or with fewer than two tokens (no decode to time)."""
    if not isinstance(timings, Mapping):
        return None
    count, rate = timings.get("predicted_n"), timings.get("predicted_per_second")
    if isinstance(count, bool) or not isinstance(count, int | float) or count < 2:
        return None
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
        return None
    return float(rate)


def tpot(e2e: float | None, ttft: float | None, output_tokens: int | None) -> float | None:
    """Time per output token after the first; None when it is undefined (<= 1 token)."""
    if e2e is None or ttft is None or not output_tokens or output_tokens <= 1:
        return None
    return (e2e - ttft) / (output_tokens - 1)


def meets_slos(
    *,
    ttft_ms: float | None,
    tpot_ms: float | None,
    e2e_ms: float | None,
    slos: Mapping[str, float],
) -> bool:
    """A request is good when every given SLO holds (value <= SLO). TPOT counts as 0 when
    undefined, as vLLM does. Keys: `ttft_ms`, `tpot_ms`, `e2e_ms`."""
    values = {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms if tpot_ms is not None else 0.0, "e2e_ms": e2e_ms}
    for key, limit in slos.items():
        if key not in values:
            raise ValueError(f"unknown SLO {key!r}; use ttft_ms, tpot_ms or e2e_ms")
        value = values[key]
        if value is None or value > limit:
            return False
    return True


def per_second(count: float, duration_s: float) -> float | None:
    return count / duration_s if duration_s > 0 else None


# --- engine metrics (Prometheus text is parsed by the caller's function) ---------------


_COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


def metrics_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """after - before for every counter present in both scrapes.

    Gauges are left out: the difference of two readings of a rate or a level means nothing (the
    H200 run's delta read `llamacpp:predicted_tokens_seconds: -447.9`, a "negative tokens/s")."""
    return {k: after[k] - before[k] for k in after if k in before and k.split("{", 1)[0].endswith(_COUNTER_SUFFIXES)}


def _sum_series(values: Mapping[str, float], suffix: str) -> float | None:
    found = [v for k, v in values.items() if k.split("{", 1)[0].endswith(suffix)]
    return sum(found) if found else None


def spec_acceptance_rate(delta: Mapping[str, float]) -> float | None:
    """Δaccepted / Δdraft_tokens (0..1) from a metrics delta; None without spec decoding.

    Matches vLLM's `vllm:spec_decode_num_accepted_tokens_total` /
    `vllm:spec_decode_num_draft_tokens_total` and llama.cpp's `llamacpp:` equivalents
    (labelled series are summed; the per-position counter is not used).
    """
    accepted = _sum_series(delta, "spec_decode_num_accepted_tokens_total")
    drafted = _sum_series(delta, "spec_decode_num_draft_tokens_total")
    if accepted is None or not drafted:
        return None
    return accepted / drafted


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)")


def parse_prometheus_samples(text: str) -> dict[str, float]:
    """A minimal Prometheus text parser: `name{labels}` -> value. A fallback for callers
    without an engine adapter; adapters' own parsers can be passed to the runner instead."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line.strip())
        if not match:
            continue
        try:
            out[match.group(1)] = float(match.group(2))
        except ValueError:
            continue
    return out


def mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return sum(items) / len(items) if items else None


# --- is a change between two runs more than their own noise? -----------------------------------

NOISE_Z = 1.96  # a two-sided 95 % test


def rank_sum_z(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Mann-Whitney U of `b` against `a` as a z score (normal approximation, ties averaged and
    corrected for); None with fewer than 3 samples a side. Positive: b's values tend higher."""
    n1, n2 = len(a), len(b)
    if n1 < 3 or n2 < 3:
        return None
    pooled = sorted([(float(v), 0) for v in a] + [(float(v), 1) for v in b])
    rank_b = 0.0
    ties = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        rank = (i + j) / 2 + 1  # the average rank of a run of equal values
        count = j - i + 1
        ties += count**3 - count
        rank_b += rank * sum(1 for _, side in pooled[i : j + 1] if side == 1)
        i = j + 1
    n = n1 + n2
    u = rank_b - n2 * (n2 + 1) / 2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return 0.0
    return (u - n1 * n2 / 2) / math.sqrt(variance)


def within_noise(
    a: float | None,
    b: float | None,
    *,
    samples_a: Sequence[float] = (),
    samples_b: Sequence[float] = (),
    spread: float | None = None,
) -> bool | None:
    """Whether the change from `a` to `b` is within the runs' own noise: from the per-request
    samples when both sides have them (a rank-sum test at 95 %), else whether it is smaller than
    `spread` (the wider of the two runs' p50..p90 spread); None when neither can tell."""
    if a is None or b is None:
        return None
    z = rank_sum_z(samples_a, samples_b)
    if z is not None:
        return abs(z) < NOISE_Z
    if spread is None:
        return None
    return abs(b - a) <= spread

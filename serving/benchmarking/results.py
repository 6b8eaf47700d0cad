"""Benchmark results: per-request records, per-level aggregates, the run. Pure; JSON-ready.

Times in the JSON are milliseconds (`*_ms`), throughputs per second, energy in joules.
Anything the run could not measure is None, never 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Self

from serving.benchmarking import stats

STATUSES = ("completed", "cancelled", "engine_died", "failed")


class _Stored:
    """A dataclass stored as JSON: `to_dict` and `from_dict` (which ignores keys that are not
    fields: a stored result may carry others), with each field named in `_lists` a list of
    other stored records."""

    _lists: ClassVar[dict[str, type[_Stored]]] = {}

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = asdict(self)  # type: ignore[call-overload]  # every subclass is a dataclass
        for name in self._lists:
            data[name] = [item.to_dict() for item in getattr(self, name)]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        kwargs = {k: v for k, v in data.items() if k in names}
        for name, item in cls._lists.items():
            kwargs[name] = [item.from_dict(x) for x in data.get(name, [])]
        return cls(**kwargs)


@dataclass
class RequestRecord(_Stored):
    """One request's raw timings, for plots and for re-deriving the aggregates."""

    start_ms: float  # offset from the level's start
    ok: bool
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    input_tokens: int | None = None  # server usage.prompt_tokens
    output_tokens: int | None = None  # server usage.completion_tokens
    output_chunks: int = 0
    error: str | None = None
    server_timings: dict[str, Any] | None = None  # llama.cpp `timings`, as sent
    retried: bool = False  # sent again on a fresh connection after a stale kept-alive one; timed from then

    @property
    def tpot_ms(self) -> float | None:
        return stats.tpot(self.e2e_ms, self.ttft_ms, self.output_tokens)

    @property
    def decode_tokens_per_s(self) -> float | None:
        value = self.tpot_ms
        return 1000.0 / value if value else None

    @property
    def engine_decode_tokens_per_s(self) -> float | None:
        """The engine's own decode rate for this request (llama.cpp's `timings.predicted_per_second`,
        its clock from the first generated token to the last); None when the engine sent none."""
        return stats.engine_decode_rate(self.server_timings)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "tpot_ms": self.tpot_ms}


@dataclass
class LevelResult(_Stored):
    """Aggregates of one load level (one concurrency, or one request rate)."""

    label: str
    concurrency: int | None
    rate: float | None
    requested: int
    completed: int
    failed: int
    cancelled: int
    duration_s: float
    ttft_ms: dict[str, float | None]
    tpot_ms: dict[str, float | None]
    itl_ms: dict[str, float | None]
    e2e_ms: dict[str, float | None]
    decode_tokens_per_s: dict[str, float | None]  # per request, 1000 / TPOT
    requests_per_s: float | None
    output_tokens_per_s: float | None
    total_tokens_per_s: float | None
    prefill_tokens_per_s: float | None  # mean over requests of input_tokens / TTFT
    input_tokens_mean: float | None
    output_tokens_mean: float | None
    goodput_requests_per_s: float | None = None  # only when SLOs were given
    # The engine's own decode clock per request (llama.cpp's timings), beside decode_tokens_per_s
    # (the panel's, from the stream): None when the engine reports no timings.
    engine_decode_tokens_per_s: dict[str, float | None] | None = None
    retried: int = 0  # requests sent again after a stale kept-alive connection (not failures)
    slos: dict[str, float] = field(default_factory=dict)
    requests: list[RequestRecord] = field(default_factory=list)
    _lists: ClassVar[dict[str, type[_Stored]]] = {"requests": RequestRecord}

    @property
    def output_tokens_sum(self) -> int:
        return sum(r.output_tokens or 0 for r in self.requests if r.ok)


def build_level(
    records: Sequence[RequestRecord],
    *,
    label: str,
    duration_s: float,
    requested: int,
    concurrency: int | None = None,
    rate: float | None = None,
    cancelled: int = 0,
    slos: Mapping[str, float] | None = None,
) -> LevelResult:
    """Aggregate raw records the way `vllm bench serve calculate_metrics` does."""
    good = [r for r in records if r.ok]
    ttfts = [r.ttft_ms for r in good if r.ttft_ms is not None]
    e2es = [r.e2e_ms for r in good if r.e2e_ms is not None]
    tpots = [t for t in (r.tpot_ms for r in good) if t is not None]
    decode = [d for d in (r.decode_tokens_per_s for r in good) if d is not None]
    engine_decode = [d for d in (r.engine_decode_tokens_per_s for r in good) if d is not None]
    itls = [gap for r in good for gap in r.itl_ms]
    out_sum = sum(r.output_tokens or 0 for r in good)
    in_sum = sum(r.input_tokens or 0 for r in good)
    prefill = [r.input_tokens / (r.ttft_ms / 1000.0) for r in good if r.input_tokens and r.ttft_ms and r.ttft_ms > 0]
    goodput = None
    if slos:
        n_good = sum(
            1 for r in good if stats.meets_slos(ttft_ms=r.ttft_ms, tpot_ms=r.tpot_ms, e2e_ms=r.e2e_ms, slos=slos)
        )
        goodput = stats.per_second(n_good, duration_s)
    return LevelResult(
        label=label,
        concurrency=concurrency,
        rate=rate,
        requested=requested,
        completed=len(good),
        failed=len(records) - len(good),
        cancelled=cancelled,
        duration_s=duration_s,
        ttft_ms=stats.summarize(ttfts),
        tpot_ms=stats.summarize(tpots),
        itl_ms=stats.summarize(itls),
        e2e_ms=stats.summarize(e2es),
        decode_tokens_per_s=stats.summarize(decode),
        requests_per_s=stats.per_second(len(good), duration_s) if good else None,
        output_tokens_per_s=stats.per_second(out_sum, duration_s) if good else None,
        total_tokens_per_s=stats.per_second(in_sum + out_sum, duration_s) if good else None,
        prefill_tokens_per_s=stats.mean(prefill),
        input_tokens_mean=stats.mean(r.input_tokens for r in good if r.input_tokens is not None),
        output_tokens_mean=stats.mean(r.output_tokens for r in good if r.output_tokens is not None),
        goodput_requests_per_s=goodput,
        engine_decode_tokens_per_s=stats.summarize(engine_decode) if engine_decode else None,
        retried=sum(1 for r in records if r.retried),
        slos=dict(slos or {}),
        requests=list(records),
    )


@dataclass
class RunResult(_Stored):
    """One benchmark run: its levels, energy, engine-side figures and the client's cost."""

    profile: dict[str, Any]
    status: str  # one of STATUSES
    reason: str = ""
    model: str = ""
    url: str = ""
    levels: list[LevelResult] = field(default_factory=list)
    _lists: ClassVar[dict[str, type[_Stored]]] = {"levels": LevelResult}
    duration_s: float = 0.0
    energy_j: float | None = None
    avg_power_w: float | None = None
    energy_source: str | None = None  # "counter" | "power" | None
    joules_per_output_token: float | None = None
    tokens_per_wh: float | None = None
    spec_acceptance_rate: float | None = None  # 0..1
    engine_metrics_delta: dict[str, float] = field(default_factory=dict)
    client_cpu_s: float | None = None
    client_cpu_s_per_1k_tokens: float | None = None  # per 1,000 output tokens streamed
    client_cpu_busy: float | None = None  # CPU s / wall s; near 1.0 = the client was the bottleneck
    served_context: int | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {self.status!r}")

    @property
    def output_tokens(self) -> int:
        return sum(level.output_tokens_sum for level in self.levels)

    @property
    def retried(self) -> int:
        """Requests sent again on a fresh connection, over all levels."""
        return sum(level.retried for level in self.levels)

    def set_energy(self, energy_j: float | None, avg_power_w: float | None, source: str | None) -> None:
        """Record energy and derive the per-token figures (None when unknown, never 0)."""
        self.energy_j = energy_j
        self.avg_power_w = avg_power_w
        self.energy_source = source
        tokens = self.output_tokens
        if energy_j is None or tokens <= 0:
            self.joules_per_output_token = None
            self.tokens_per_wh = None
            return
        self.joules_per_output_token = energy_j / tokens
        self.tokens_per_wh = tokens / (energy_j / 3600.0) if energy_j > 0 else None

    def set_client_cpu(self, cpu_s: float) -> None:
        self.client_cpu_s = cpu_s
        tokens = self.output_tokens
        self.client_cpu_s_per_1k_tokens = cpu_s / tokens * 1000.0 if tokens else None
        self.client_cpu_busy = cpu_s / self.duration_s if self.duration_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "retried": self.retried}

"""Named benchmark profiles and their equivalent `vllm bench serve` / `guidellm` commands.

A profile is one of three load shapes:
- *concurrency*: one level per entry of `concurrency`, each a closed loop of that many streams
  (`(1,)` is single-stream);
- *rate*: open-loop Poisson arrivals at `request_rate` req/s (seeded), optionally capped by
  `max_concurrency`;
- *long-context*: `context_fraction` set; the prompt fills that fraction of the served
  context (minus the output), resolved with `resolve(served_context)` before running.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")


@dataclass(frozen=True)
class BenchmarkProfile:
    name: str
    concurrency: tuple[int, ...] = (1,)
    request_rate: float | None = None  # req/s; set = rate mode
    max_concurrency: int | None = None  # cap in rate mode
    num_requests: int = 8  # per level
    input_tokens: int = 128
    output_tokens: int = 64
    context_fraction: float | None = None  # set = long-context mode
    seed: int = 0
    warmup_requests: int = 1
    timeout_s: float = 300.0  # per request
    slos: dict[str, float] = field(default_factory=dict)  # goodput: ttft_ms, tpot_ms, e2e_ms
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "concurrency", tuple(int(c) for c in self.concurrency))
        object.__setattr__(self, "slos", dict(self.slos))
        self.validate()

    # -- validation ---------------------------------------------------------------------

    def validate(self) -> None:
        if not self.name:
            raise ValueError("profile name must not be empty")
        if self.request_rate is None:
            if not self.concurrency:
                raise ValueError("concurrency needs at least one level, e.g. (1, 4)")
            for level in self.concurrency:
                if level < 1:
                    raise ValueError(f"concurrency must be >= 1, got {level}")
            if len(set(self.concurrency)) != len(self.concurrency):
                raise ValueError(f"concurrency levels repeat: {self.concurrency}")
        else:
            if not self.request_rate > 0:
                raise ValueError(f"request_rate must be > 0 req/s, got {self.request_rate}")
            if self.context_fraction is not None:
                raise ValueError("a profile is either rate-based or long-context, not both")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {self.max_concurrency}")
        if self.num_requests < 1:
            raise ValueError(f"num_requests must be >= 1, got {self.num_requests}")
        if self.input_tokens <= 0:
            raise ValueError(f"input_tokens must be > 0, got {self.input_tokens}")
        if self.output_tokens <= 0:
            raise ValueError(f"output_tokens must be > 0, got {self.output_tokens}")
        if self.context_fraction is not None and not 0 < self.context_fraction <= 1:
            raise ValueError(f"context_fraction must be within (0, 1], got {self.context_fraction}")
        if self.warmup_requests < 0:
            raise ValueError(f"warmup_requests must be >= 0, got {self.warmup_requests}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        for key, value in self.slos.items():
            if key not in SLO_KEYS:
                raise ValueError(f"unknown SLO {key!r}; use one of {', '.join(SLO_KEYS)}")
            if not value > 0:
                raise ValueError(f"SLO {key} must be > 0 ms, got {value}")

    def check_context(self, served_context: int) -> None:
        """Raise ValueError when a request would not fit the served context."""
        if served_context < 2:
            raise ValueError(f"served context must be >= 2 tokens, got {served_context}")
        need = self.input_tokens + self.output_tokens
        if need > served_context:
            raise ValueError(
                f"input_tokens + output_tokens = {self.input_tokens} + {self.output_tokens} = {need} "
                f"exceeds the served context of {served_context} tokens"
            )

    def resolve(self, served_context: int | None) -> BenchmarkProfile:
        """A profile with concrete input_tokens, checked against the served context."""
        if self.context_fraction is None:
            if served_context is not None:
                self.check_context(served_context)
            return self
        if served_context is None:
            raise ValueError("a long-context profile needs the served context length")
        input_tokens = int(served_context * self.context_fraction) - self.output_tokens
        if input_tokens <= 0:
            raise ValueError(
                f"context {served_context} x {self.context_fraction} leaves no room for a prompt "
                f"after {self.output_tokens} output tokens"
            )
        resolved = replace(self, input_tokens=input_tokens)
        resolved.check_context(served_context)
        return resolved

    # -- shape --------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        if self.request_rate is not None:
            return "rate"
        if self.context_fraction is not None:
            return "long-context"
        return "concurrency"

    def level_labels(self) -> list[str]:
        """Each level's label, as the load generator names it in a run's results."""
        if self.request_rate is not None:
            return [f"{self.request_rate:g} req/s"]
        prefix = "long-context, " if self.context_fraction is not None else ""
        return [f"{prefix}concurrency {c}" for c in self.concurrency]

    @property
    def total_requests(self) -> int:
        levels = 1 if self.request_rate is not None else len(self.concurrency)
        return levels * self.num_requests

    # -- serialisation ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["concurrency"] = list(self.concurrency)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchmarkProfile:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown profile field(s): {', '.join(unknown)}")
        kwargs = dict(data)
        if "concurrency" in kwargs:
            kwargs["concurrency"] = tuple(kwargs["concurrency"])
        return cls(**kwargs)


PROFILES: dict[str, BenchmarkProfile] = {
    p.name: p
    for p in (
        BenchmarkProfile(
            name="quick",
            concurrency=(1, 4),
            num_requests=8,
            input_tokens=128,
            output_tokens=64,
            description="A minute's sanity check: 1 and 4 streams, 8 requests each, 128 in / 64 out.",
        ),
        BenchmarkProfile(
            name="single-stream",
            num_requests=5,
            input_tokens=256,
            output_tokens=256,
            description="One request at a time: the decode speed one user sees.",
        ),
        BenchmarkProfile(
            name="sweep",
            concurrency=(1, 2, 4, 8),
            num_requests=16,
            input_tokens=256,
            output_tokens=128,
            description="Aggregate throughput as concurrency grows: 1, 2, 4, 8 streams.",
        ),
        BenchmarkProfile(
            name="long-context",
            num_requests=2,
            output_tokens=16,
            context_fraction=0.9,
            description="One prompt near the served context: prefill tokens/s and TTFT.",
        ),
        BenchmarkProfile(
            name="poisson-2rps",
            request_rate=2.0,
            num_requests=32,
            input_tokens=256,
            output_tokens=128,
            description="Open-loop Poisson arrivals at 2 req/s (seeded), as users arrive.",
        ),
    )
}


def get_profile(name: str) -> BenchmarkProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}") from None


# The numbers that make a load: a run whose numbers differ from its named profile's is another
# load, labelled as custom and never compared as that profile. (SLOs only add goodput.)
LOAD_FIELDS = (
    ("concurrency", "c"),
    ("request_rate", "rate"),
    ("max_concurrency", "max-c"),
    ("num_requests", "n"),
    ("input_tokens", "in"),
    ("output_tokens", "out"),
    ("context_fraction", "ctx"),
)


def _load_value(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(_load_value(v) for v in value)
    if isinstance(value, float):
        return _fmt(value)
    return str(value)


def profile_label(profile: Mapping[str, Any] | None, name: str = "") -> str:
    """How a run's profile reads wherever runs are listed and compared: "quick" when its numbers
    are the named profile's, "quick (custom: c=1,2 n=4)" naming those that differ, and
    "custom (c=2 n=4 in=128 out=64)" for a profile of numbers only. A field the stored profile
    lacks (older runs) counts as the named profile's."""
    data = profile if isinstance(profile, Mapping) else {}
    name = str(data.get("name") or name or "custom")
    base = PROFILES.get(name)
    if base is None:
        shown = [f"{short}={_load_value(data[key])}" for key, short in LOAD_FIELDS if data.get(key) is not None]
        return f"{name} ({' '.join(shown)})" if shown else name
    named = base.to_dict()
    differ = [
        f"{short}={_load_value(data[key])}"
        for key, short in LOAD_FIELDS
        if key in data and _load_value(data[key]) != _load_value(named[key])
    ]
    return f"{name} (custom: {' '.join(differ)})" if differ else name


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _vllm_bench_serve(profile: BenchmarkProfile, base_url: str, model: str, concurrency: int | None) -> list[str]:
    """`vllm bench serve`: one level per invocation (`concurrency`, default the first)."""
    argv = [
        "vllm", "bench", "serve",
        "--backend", "openai-chat",
        "--base-url", base_url,
        "--endpoint", "/v1/chat/completions",
        "--model", model,
        "--dataset-name", "random",
        "--random-input-len", str(profile.input_tokens),
        "--random-output-len", str(profile.output_tokens),
        "--random-range-ratio", "0",
        "--num-prompts", str(profile.num_requests),
        "--ignore-eos",
        "--seed", str(profile.seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99",
    ]  # fmt: skip
    if profile.request_rate is not None:
        argv += ["--request-rate", _fmt(profile.request_rate), "--burstiness", "1"]
        if profile.max_concurrency is not None:
            argv += ["--max-concurrency", str(profile.max_concurrency)]
    else:
        level = concurrency if concurrency is not None else profile.concurrency[0]
        if level not in profile.concurrency:
            raise ValueError(f"concurrency {level} is not a level of profile {profile.name!r}")
        argv += ["--max-concurrency", str(level)]
    if profile.slos:
        short = {"ttft_ms": "ttft", "tpot_ms": "tpot", "e2e_ms": "e2el"}
        argv += ["--goodput", *(f"{short[k]}:{_fmt(v)}" for k, v in profile.slos.items())]
    return argv


def _guidellm_benchmark(profile: BenchmarkProfile, base_url: str, model: str, concurrency: int | None) -> list[str]:
    """`guidellm benchmark` (v0.4-0.6 CLI): every level at once, so `concurrency` is not used."""
    argv = ["guidellm", "benchmark", "--target", base_url, "--model", model]
    if profile.request_rate is not None:
        argv += ["--profile", "poisson", "--rate", _fmt(profile.request_rate)]
    elif profile.concurrency == (1,):
        argv += ["--profile", "synchronous"]
    else:
        argv += ["--profile", "concurrent", "--rate", ",".join(str(c) for c in profile.concurrency)]
    argv += [
        "--max-requests", str(profile.num_requests),
        "--data", f"prompt_tokens={profile.input_tokens},output_tokens={profile.output_tokens}",
        "--random-seed", str(profile.seed),
    ]  # fmt: skip
    return argv


# The load generators a person can reproduce a profile with, by the name `tool` takes.
_TOOLS = {"vllm": _vllm_bench_serve, "guidellm": _guidellm_benchmark}


def equivalent_command(
    profile: BenchmarkProfile,
    *,
    base_url: str,
    model: str,
    tool: str = "vllm",
    concurrency: int | None = None,
) -> list[str]:
    """The argv a person would run to reproduce `profile` by hand.

    tool="vllm": `vllm bench serve` runs one level per invocation, so pick it with
    `concurrency` (default: the first level); see `equivalent_commands` for all of them.
    tool="guidellm": `guidellm benchmark` (v0.4-0.6 CLI) takes every level at once.
    `base_url` is the server root, e.g. http://127.0.0.1:8000 (no /v1). Pass a long-context
    profile through `resolve()` first so its input length is the real one.
    """
    build = _TOOLS.get(tool)
    if build is None:
        raise ValueError(f"unknown tool {tool!r}; use 'vllm' or 'guidellm'")
    return build(profile, base_url.rstrip("/"), model, concurrency)


def equivalent_commands(profile: BenchmarkProfile, *, base_url: str, model: str) -> dict[str, list[list[str]]]:
    """Every command: one `vllm bench serve` per level, and the one guidellm command."""
    levels: list[int | None] = [None] if profile.request_rate is not None else list(profile.concurrency)
    return {
        "vllm": [
            equivalent_command(profile, base_url=base_url, model=model, tool="vllm", concurrency=c) for c in levels
        ],
        "guidellm": [equivalent_command(profile, base_url=base_url, model=model, tool="guidellm")],
    }

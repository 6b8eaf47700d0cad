"""Named benchmark profiles, their validation and the equivalent hand-run commands."""

from __future__ import annotations

import pytest

from serving.benchmarking.profiles import (
    PROFILES,
    BenchmarkProfile,
    equivalent_command,
    equivalent_commands,
    get_profile,
)


def test_named_profiles() -> None:
    quick = get_profile("quick")
    assert (quick.concurrency, quick.num_requests, quick.input_tokens, quick.output_tokens) == (
        (1, 4),
        8,
        128,
        64,
    )
    assert get_profile("sweep").concurrency == (1, 2, 4, 8)
    assert get_profile("single-stream").concurrency == (1,)
    assert get_profile("poisson-2rps").mode == "rate" and get_profile("poisson-2rps").request_rate == 2.0
    assert get_profile("long-context").mode == "long-context"
    assert all(p.description for p in PROFILES.values())
    with pytest.raises(ValueError, match="unknown profile 'huge'; choose one of quick"):
        get_profile("huge")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": (0,)}, "concurrency must be >= 1, got 0"),
        ({"concurrency": ()}, "concurrency needs at least one level"),
        ({"concurrency": (2, 2)}, "concurrency levels repeat"),
        ({"input_tokens": 0}, "input_tokens must be > 0, got 0"),
        ({"output_tokens": -5}, "output_tokens must be > 0, got -5"),
        ({"num_requests": 0}, "num_requests must be >= 1, got 0"),
        ({"request_rate": 0.0}, "request_rate must be > 0 req/s"),
        ({"context_fraction": 1.5}, r"context_fraction must be within \(0, 1\]"),
        ({"slos": {"latency": 5}}, "unknown SLO 'latency'"),
        ({"slos": {"ttft_ms": 0}}, "SLO ttft_ms must be > 0 ms"),
        ({"max_concurrency": 0, "request_rate": 1.0}, "max_concurrency must be >= 1"),
    ],
)
def test_validation_says_what_is_wrong(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BenchmarkProfile(name="x", **kwargs)


def test_context_bounds() -> None:
    profile = BenchmarkProfile(name="x", input_tokens=4000, output_tokens=200)
    with pytest.raises(ValueError, match="4000 \\+ 200 = 4200 exceeds the served context of 4096 tokens"):
        profile.resolve(4096)
    assert BenchmarkProfile(name="y").resolve(4096).input_tokens == 128


def test_long_context_prompt_fills_the_served_context() -> None:
    long = get_profile("long-context")
    with pytest.raises(ValueError, match="needs the served context length"):
        long.resolve(None)
    resolved = long.resolve(1024)
    assert resolved.input_tokens == int(1024 * 0.9) - 16
    assert resolved.input_tokens + resolved.output_tokens <= 1024
    with pytest.raises(ValueError, match="leaves no room for a prompt"):
        long.resolve(16)


def test_round_trip_through_a_dict() -> None:
    profile = BenchmarkProfile(name="mine", concurrency=(1, 8), slos={"ttft_ms": 500.0})
    data = profile.to_dict()
    assert data["concurrency"] == [1, 8]
    assert BenchmarkProfile.from_dict(data) == profile
    with pytest.raises(ValueError, match="unknown profile field"):
        BenchmarkProfile.from_dict({**data, "colour": "red"})


def test_equivalent_vllm_bench_serve_command() -> None:
    profile = BenchmarkProfile(name="q", concurrency=(1, 4), num_requests=8, slos={"ttft_ms": 500, "tpot_ms": 50})
    argv = equivalent_command(profile, base_url="http://gpu1:8000/", model="qwen", concurrency=4)
    assert argv[:3] == ["vllm", "bench", "serve"]
    text = " ".join(argv)
    for part in (
        "--backend openai-chat",
        "--base-url http://gpu1:8000 ",
        "--endpoint /v1/chat/completions",
        "--model qwen",
        "--random-input-len 128",
        "--random-output-len 64",
        "--num-prompts 8",
        "--max-concurrency 4",
        "--ignore-eos",
        "--goodput ttft:500 tpot:50",
    ):
        assert part in text
    commands = equivalent_commands(profile, base_url="http://gpu1:8000", model="qwen")
    assert [c[c.index("--max-concurrency") + 1] for c in commands["vllm"]] == ["1", "4"]
    with pytest.raises(ValueError, match="concurrency 3 is not a level"):
        equivalent_command(profile, base_url="http://x", model="m", concurrency=3)


def test_equivalent_commands_for_rates_and_guidellm() -> None:
    poisson = get_profile("poisson-2rps")
    vllm = " ".join(equivalent_command(poisson, base_url="http://h:8000", model="m"))
    assert "--request-rate 2 --burstiness 1" in vllm and "--max-concurrency" not in vllm
    guide = equivalent_command(get_profile("sweep"), base_url="http://h:8000", model="m", tool="guidellm")
    assert guide[:4] == ["guidellm", "benchmark", "--target", "http://h:8000"]
    assert "--profile concurrent --rate 1,2,4,8" in " ".join(guide)
    assert "prompt_tokens=256,output_tokens=128" in guide
    single = equivalent_command(get_profile("single-stream"), base_url="http://h", model="m", tool="guidellm")
    assert "synchronous" in single
    with pytest.raises(ValueError, match="unknown tool"):
        equivalent_command(poisson, base_url="http://h", model="m", tool="ab")

"""Benchmark maths, results and workloads: pure, no engine (definitions: engines.md §8)."""

from __future__ import annotations

import json

import pytest

from serving.benchmarking import stats
from serving.benchmarking.results import RequestRecord, RunResult, build_level
from serving.benchmarking.workload import LinearTokenModel, fit_prompt, passage_words, poisson_offsets


def chunk(content: str | None = None, **delta: object) -> dict:
    if content is not None:
        delta["content"] = content
    return {"choices": [{"index": 0, "delta": delta}]}


def test_percentiles_interpolate_like_numpy() -> None:
    values = [float(v) for v in range(1, 11)]
    assert stats.percentile(values, 50) == pytest.approx(5.5)
    assert stats.percentile(values, 90) == pytest.approx(9.1)
    assert stats.percentile(values, 99) == pytest.approx(9.91)
    assert stats.summarize(values) == pytest.approx({"mean": 5.5, "p50": 5.5, "p90": 9.1, "p99": 9.91})


def test_nothing_measured_is_none_not_zero() -> None:
    assert stats.summarize([]) == {"mean": None, "p50": None, "p90": None, "p99": None}


def test_stream_timer_follows_vllm_definitions() -> None:
    timer = stats.StreamTimer(start=10.0)
    timer.feed(chunk(role="assistant", content=""), 10.05)  # role chunk: not output
    timer.feed(chunk("Hello"), 10.2)  # first output -> TTFT 0.2
    timer.feed(chunk(" world"), 10.25)
    timer.feed(chunk(""), 10.4)  # empty content without role counts as output
    timer.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}, 10.41)
    timer.feed({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 4}}, 11.0)
    assert timer.ok
    assert timer.ttft == pytest.approx(0.2)
    assert timer.itl == pytest.approx([0.05, 0.15])  # per output chunk
    assert timer.output_chunks == 3
    assert timer.e2e == pytest.approx(0.4)  # the usage chunk does not extend the end time
    assert (timer.prompt_tokens, timer.output_tokens) == (12, 4)  # tokens from usage
    assert stats.tpot(timer.e2e, timer.ttft, timer.output_tokens) == pytest.approx(0.2 / 3)


@pytest.mark.parametrize(
    ("delta", "is_output"),
    [
        ({"reasoning": "hmm"}, True),
        ({"reasoning_content": "hmm"}, True),
        ({"tool_calls": [{"index": 0}]}, True),
        ({"role": "assistant"}, False),
        ({"role": "assistant", "content": ""}, False),
        ({}, False),
    ],
)
def test_what_counts_as_an_output_chunk(delta: dict, is_output: bool) -> None:
    assert stats.is_output_chunk({"choices": [{"delta": delta}]}) is is_output


def test_request_without_output_is_a_failure_and_tpot_needs_two_tokens() -> None:
    timer = stats.StreamTimer(start=0.0)
    timer.feed({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 0}}, 1.0)
    assert not timer.ok and timer.ttft is None and timer.e2e is None
    assert stats.tpot(0.5, 0.5, 1) is None


def test_llama_cpp_timings_are_captured_from_the_stream() -> None:
    timer = stats.StreamTimer(start=0.0)
    timer.feed(chunk("x"), 0.1)
    timer.feed({"choices": [], "usage": {"completion_tokens": 1}, "timings": {"predicted_per_second": 99.5}}, 0.2)
    assert timer.server_timings == {"predicted_per_second": 99.5}


def record(start: float, ttft: float, e2e: float, out: int, inp: int = 100) -> RequestRecord:
    gap = (e2e - ttft) / (out - 1)
    return RequestRecord(
        start_ms=start,
        ok=True,
        ttft_ms=ttft,
        e2e_ms=e2e,
        itl_ms=[gap] * (out - 1),
        input_tokens=inp,
        output_tokens=out,
        output_chunks=out,
    )


def test_level_throughputs_and_goodput() -> None:
    records = [
        record(0, ttft=100, e2e=1100, out=11),  # TPOT 100 ms
        record(0, ttft=300, e2e=800, out=11),  # TPOT 50 ms
        RequestRecord(start_ms=5, ok=False, error="HTTP 500: boom"),
    ]
    level = build_level(
        records, label="c2", duration_s=2.0, requested=3, concurrency=2, slos={"ttft_ms": 200, "tpot_ms": 120}
    )
    assert (level.completed, level.failed) == (2, 1)
    assert level.requests_per_s == pytest.approx(1.0)
    assert level.output_tokens_per_s == pytest.approx(11.0)
    assert level.total_tokens_per_s == pytest.approx(111.0)
    assert level.ttft_ms["mean"] == pytest.approx(200)
    assert level.tpot_ms["mean"] == pytest.approx(75)
    assert level.decode_tokens_per_s["mean"] == pytest.approx((10 + 20) / 2)
    assert level.goodput_requests_per_s == pytest.approx(0.5)  # only the first meets TTFT <= 200
    assert level.prefill_tokens_per_s == pytest.approx((1000 + 100 / 0.3) / 2)
    assert level.itl_ms["p50"] == pytest.approx(75)


def test_no_goodput_without_slos() -> None:
    level = build_level([record(0, 10, 20, 3)], label="c1", duration_s=1.0, requested=1, concurrency=1)
    assert level.goodput_requests_per_s is None


def test_run_result_round_trips_through_json_with_the_documented_shape() -> None:
    level = build_level([record(0, 100, 1100, 11)], label="c1", duration_s=1.0, requested=1, concurrency=1)
    run = RunResult(profile={"name": "quick"}, status="completed", levels=[level], duration_s=0.1)
    run.set_energy(220.0, 110.0, "counter")
    run.set_client_cpu(0.011)
    data = json.loads(json.dumps(run.to_dict()))
    lvl = data["levels"][0]
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(lvl[key]) == {"mean", "p50", "p90", "p99"}
    for key in (
        "output_tokens_per_s",
        "total_tokens_per_s",
        "requests_per_s",
        "completed",
        "failed",
        "duration_s",
        "concurrency",
        "rate",
        "input_tokens_mean",
        "output_tokens_mean",
    ):
        assert key in lvl
    raw = lvl["requests"][0]
    assert {"start_ms", "ttft_ms", "e2e_ms", "itl_ms", "input_tokens", "output_tokens", "ok", "error"} <= set(raw)
    assert data["joules_per_output_token"] == pytest.approx(20.0)
    assert data["tokens_per_wh"] == pytest.approx(11 / (220 / 3600))
    assert data["client_cpu_s_per_1k_tokens"] == pytest.approx(1.0)
    assert data["client_cpu_busy"] == pytest.approx(0.11)
    assert RunResult.from_dict(data).to_dict() == data


def test_unknown_energy_stays_unknown() -> None:
    run = RunResult(profile={}, status="completed")
    run.set_energy(None, None, None)
    assert run.energy_j is None and run.joules_per_output_token is None and run.tokens_per_wh is None


def test_status_is_checked() -> None:
    with pytest.raises(ValueError, match="status must be one of"):
        RunResult(profile={}, status="exploded")


def test_spec_decode_acceptance_from_a_metrics_delta() -> None:
    before = stats.parse_prometheus_samples(
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 100\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 80\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 50\n'
    )
    after = {k: v * 3 for k, v in before.items()}
    delta = stats.metrics_delta(before, after)
    assert stats.spec_acceptance_rate(delta) == pytest.approx(160 / 200)
    assert stats.spec_acceptance_rate({"llamacpp:tokens_predicted_total": 10}) is None


def test_prompts_hit_the_token_target_and_differ_per_request() -> None:
    def words(text: str) -> int:
        return len(text.split())

    a = fit_prompt(200, words, index=0, seed=1, overhead=7)
    b = fit_prompt(200, words, index=1, seed=1, overhead=7)
    assert a.tokens == 200 and words(a.text) == 193
    assert a.text != b.text and a.text.split()[:2] != b.text.split()[:2]  # no shared prefix
    assert fit_prompt(200, words, index=0, seed=1, overhead=7) == a  # deterministic


def test_prompt_fitting_with_multi_token_words_stays_just_under() -> None:
    def tokens(text: str) -> int:  # long words cost two tokens
        return sum(2 if len(w) > 5 else 1 for w in text.split())

    prompt = fit_prompt(1000, tokens, index=3)
    assert 998 <= prompt.tokens <= 1000
    one_more = passage_words(3, 0, len(prompt.text.split()) + 1)
    assert tokens(" ".join(one_more)) > 1000  # the longest passage that fits


def test_usage_calibrated_token_model() -> None:
    model = LinearTokenModel.from_probes(40, 70, 400, 538)  # 1.3 tokens/word + 18 template tokens
    assert model.per_word == pytest.approx(1.3)
    assert model(" ".join(passage_words(0, 0, 100))) == 148
    prompt = fit_prompt(512, model)
    assert 510 <= prompt.tokens <= 512


def test_poisson_arrivals_are_seeded_and_at_the_requested_rate() -> None:
    offsets = poisson_offsets(4.0, 2000, seed=7)
    assert offsets == poisson_offsets(4.0, 2000, seed=7)
    assert offsets[0] == 0.0 and offsets == sorted(offsets)
    assert 2000 / offsets[-1] == pytest.approx(4.0, rel=0.08)

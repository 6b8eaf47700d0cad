"""The pure search of a tuning run (serving/tuning): the space checked by the adapters' knob specs,
exhaustive and sampled search, limits and early stop, the winner against the base within noise,
the Pareto front. No database."""

from __future__ import annotations

import pytest

from serving.tuning import (
    Candidate,
    Limit,
    Objective,
    Tried,
    TuningInputError,
    limit_breaks,
    limits_from_input,
    next_candidate,
    pareto_front,
    ranked,
    space_check,
    verdict,
)
from serving.tuning.objective import Scored, limits_unjudged, mean_figures
from serving.tuning.search import PRUNED

LEVEL = "concurrency 4"


def test_a_space_is_checked_and_normalised_by_the_engines_own_knob_specs():
    space = space_check("llama.cpp", {"parallel": [1, "2", 4.0], "flash_attn": ["on", "off"]})
    assert space.to_dict() == {"parallel": [1, 2, 4], "flash_attn": ["on", "off"]}
    assert space.size() == 6
    assert [c.knobs for c in space.candidates()][:2] == [
        {"parallel": 1, "flash_attn": "on"},
        {"parallel": 1, "flash_attn": "off"},
    ]


@pytest.mark.parametrize(
    ("space", "field", "words"),
    [
        ({"no_such_knob": [1, 2]}, "no_such_knob", "has no knob"),
        ({"parallel": [0, 2]}, "parallel", "parallel"),  # below the spec's minimum
        ({"cache_type_k": ["f16", "f77"]}, "cache_type_k", "must be one of"),
        ({"mmproj": ["/a.gguf", "/b.gguf"]}, "mmproj", "not tuned"),  # a file the engine opens
        ({"parallel": [2, 2]}, "parallel", "twice"),
        ({"parallel": [2]}, "space", "at least two candidates"),
        ({"parallel": "1,2"}, "parallel", "list of values"),
    ],
)
def test_a_space_the_engine_would_refuse_is_refused_naming_the_knob(space, field, words):
    with pytest.raises(TuningInputError) as exc:
        space_check("llama.cpp", space)
    assert exc.value.field == field and words in str(exc.value)


def test_a_small_space_is_searched_exhaustively_in_order_and_ends():
    space = space_check("llama.cpp", {"parallel": [1, 2], "batch_size": [64, 512]})
    tried: list[Tried] = []
    while (found := next_candidate(space, tried)) is not None:
        tried.append(Tried(found.knobs, value=1.0))
    assert [t.knobs for t in tried] == [
        {"parallel": 1, "batch_size": 64},
        {"parallel": 1, "batch_size": 512},
        {"parallel": 2, "batch_size": 64},
        {"parallel": 2, "batch_size": 512},
    ]
    # A refused or pruned candidate counts as tried: it is never offered again.
    assert next_candidate(space, [Tried({"parallel": 1, "batch_size": 64}, outcome=PRUNED)]) == Candidate(
        "llama.cpp", {"parallel": 1, "batch_size": 512}
    )


def test_a_large_space_is_sampled_by_optuna_never_twice_and_repeatably():
    space = space_check(
        "llama.cpp",
        {"parallel": [1, 2, 4, 8], "batch_size": [64, 128, 256, 512], "threads": [1, 2], "flash_attn": ["on", "off"]},
    )
    assert space.size() == 64

    def search(seed: int) -> list[dict]:
        tried: list[Tried] = []
        for i in range(20):
            found = next_candidate(space, tried, seed=seed)
            assert found is not None and space.contains(found)
            knobs = found.knobs
            # parallel is what pays here: the sampler is told so
            tried.append(Tried(knobs, value=knobs["parallel"] * 10.0 + i * 0.01))
        return [t.knobs for t in tried]

    first = search(seed=7)
    assert len({tuple(sorted(k.items())) for k in first}) == 20  # never the same candidate twice
    assert search(seed=7) == first  # rebuilt from the same trials, it asks the same: a restart resumes it
    # Past its random start-up trials, TPE leans to what paid.
    assert sum(k["parallel"] == 8 for k in first[10:]) > sum(k["parallel"] == 1 for k in first[10:])


def test_limits_parse_and_judge_absolute_and_relative_to_the_base():
    limits = limits_from_input("ttft_p95<=500, j_per_token<=base, throughput>=10", level=LEVEL)
    assert limits == (
        Limit("ttft_p95", LEVEL, bound=500.0),
        Limit("j_per_token", "run", of_base=True),
        Limit("throughput", LEVEL, bound=10.0),
    )
    half = limits_from_input("ttft_p95<=0.5*base", level=LEVEL)
    assert half == (Limit("ttft_p95", LEVEL, bound=0.5, of_base=True),)
    assert limit_breaks({LEVEL: {"ttft_p95": 140.0}}, half, {LEVEL: {"ttft_p95": 300.0}}) == []
    (slower,) = limit_breaks({LEVEL: {"ttft_p95": 160.0}}, half, {LEVEL: {"ttft_p95": 300.0}})
    assert "0.5 x the base's" in slower and "the bound: 150" in slower
    base = {LEVEL: {"ttft_p95": 300.0, "throughput": 50.0}, "run": {"j_per_token": 2.0}}
    good = {LEVEL: {"ttft_p95": 450.0, "throughput": 80.0}, "run": {"j_per_token": 1.5}}
    slow = {LEVEL: {"ttft_p95": 650.0, "throughput": 90.0}, "run": {"j_per_token": 2.5}}
    assert limit_breaks(good, limits, base) == []
    broken = limit_breaks(slow, limits, base)
    assert len(broken) == 2 and "TTFT p95" in broken[0] and "650" in broken[0] and "the bound: 2" in broken[1]
    # A level that measured nothing breaks its limits; energy not measured (a CPU host) is not judged.
    cpu = {LEVEL: {"ttft_p95": None, "throughput": 80.0}, "run": {"j_per_token": None}}
    assert ["nothing measured" in b for b in limit_breaks(cpu, limits, base)] == [True]
    assert limits_unjudged(cpu, limits, base) == ["J per output token <= the base's: not measured on this host"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("ttft_p95>=500", "limited with <="),
        ("throughput<=5", "limited with >="),
        ("speed<=5", "unknown metric"),
        ("ttft_p95<=fast", "a number, 'base'"),
        ("ttft_p95<=0*base", "above 0"),
        ("ttft_p95 500", "METRIC<=NUMBER"),
    ],
)
def test_a_limit_that_cannot_be_applied_is_refused(text, words):
    with pytest.raises(TuningInputError) as exc:
        limits_from_input(text, level=LEVEL)
    assert words in str(exc.value) and exc.value.field == "limits"


def test_the_ranking_keeps_only_trials_that_met_the_limits_best_first():
    higher = Objective("throughput", LEVEL)
    trials = [Scored("a", 10.0, True), Scored("b", 30.0, False), Scored("c", 20.0, True), Scored("d", None, True)]
    assert [t.key for t in ranked(trials, higher)] == ["c", "a"]
    assert [t.key for t in ranked(trials, Objective("ttft_p95", LEVEL))] == ["a", "c"]


def test_the_winner_beats_the_base_only_beyond_the_rounds_own_noise():
    objective = Objective("throughput", LEVEL)
    clear = verdict(objective, [100.0, 102.0, 98.0], [130.0, 128.0, 131.0])
    assert clear.beats_base and clear.within_noise is False and "rank-sum" in clear.basis
    assert clear.change_pct == pytest.approx(29.67, abs=0.01)
    noisy = verdict(objective, [100.0, 120.0, 90.0], [105.0, 95.0, 118.0])
    assert not noisy.beats_base and noisy.within_noise is True and "noise" in noisy.summary
    # Two rounds a side: the rounds' spread decides (the benchmark comparison's fallback).
    spread = verdict(objective, [100.0, 104.0], [103.0, 101.0])
    assert spread.within_noise is True and spread.basis == "the rounds' spread"
    once = verdict(objective, [100.0], [200.0])
    assert not once.beats_base and once.within_noise is None and "too few rounds" in once.summary
    worse = verdict(Objective("ttft_p95", LEVEL), [100.0, 101.0, 99.0], [150.0, 151.0, 149.0])
    assert not worse.beats_base and "the base is better" in worse.summary


def test_the_pareto_front_keeps_the_points_nothing_beats_on_every_axis():
    points = [
        {"tput": 100.0, "ttft": 50.0},  # fast and quick: on the front
        {"tput": 150.0, "ttft": 90.0},  # more throughput for more latency: on it
        {"tput": 90.0, "ttft": 60.0},  # worse than the first on both: off
        {"tput": 150.0, "ttft": 95.0},  # as much throughput as the second, slower: off
        {"tput": 200.0, "ttft": None},  # not measured: left out
    ]
    assert pareto_front(points, {"tput": True, "ttft": False}) == [0, 1]


def test_mean_figures_average_what_each_round_measured():
    rounds = [{LEVEL: {"throughput": 10.0, "ttft_p95": None}}, {LEVEL: {"throughput": 20.0, "ttft_p95": 40.0}}]
    assert mean_figures(rounds) == {LEVEL: {"throughput": 15.0, "ttft_p95": 40.0}}


# --- other engines: the engine as one more dimension of the space ---------------------------------

BOTH = {"vllm", "sglang"}  # the engines the host has installed


def test_a_space_over_two_engines_checks_each_by_its_own_knob_specs_and_searches_them_in_order():
    space = space_check(
        "vllm",
        {"max_num_seqs": [4, "8"]},
        engines={"sglang": {"max_running_requests": ["4", 8.0]}},
        model_format="hf",
        installed=BOTH,
    )
    assert space.to_dict() == {"max_num_seqs": [4, 8]}  # what TuningRun.space keeps, as before
    assert space.engines_dict() == {"sglang": {"max_running_requests": [4, 8]}}
    assert space.size() == 4 and space.engines == ("vllm", "sglang")
    assert space.describe() == "max_num_seqs in [4, 8]; SGLang: max_running_requests in [4, 8]"
    tried: list[Tried] = []
    while (found := next_candidate(space, tried)) is not None:
        tried.append(Tried(found.knobs, value=1.0, engine=found.engine))
    # The engines in turn, the base's first, each with its own knobs in its own order: a run that
    # stops at max_trials (8 by default) has measured every engine early, not the base's alone.
    assert [(t.engine, t.knobs) for t in tried] == [
        ("vllm", {"max_num_seqs": 4}),
        ("sglang", {"max_running_requests": 4}),
        ("vllm", {"max_num_seqs": 8}),
        ("sglang", {"max_running_requests": 8}),
    ]
    # A trial stored without its engine (before runs tried others) ran the base's: the engine is part
    # of what was tried, so the same knobs of another engine are still to try.
    assert next_candidate(space, [Tried({"max_num_seqs": 4}), Tried({"max_num_seqs": 8})]) == Candidate(
        "sglang", {"max_running_requests": 4}
    )
    # A base engine of many candidates and another of few: the other's come second and fourth, not
    # after the twelve of the base (which max_trials would never reach).
    many = space_check(
        "vllm",
        {"max_num_seqs": [4, 8, 16, 32, 64, 128], "gpu_memory_utilization": [0.85, 0.9]},
        engines={"sglang": {"max_running_requests": [4, 8]}},
        model_format="hf",
        installed=BOTH,
    )
    order = [c.engine for c in many.candidates()]
    assert order[:4] == ["vllm", "sglang", "vllm", "sglang"] and order[4:] == ["vllm"] * 10
    assert Candidate("sglang", {"max_running_requests": 4}).describe("vllm") == "SGLang max_running_requests=4"


def test_another_engine_alone_or_at_its_defaults_makes_a_space():
    only = space_check("vllm", {}, engines={"sglang": {"mem_fraction_static": [0.8, 0.9]}}, model_format="hf")
    assert [(c.engine, c.knobs) for c in only.candidates()] == [
        ("sglang", {"mem_fraction_static": 0.8}),
        ("sglang", {"mem_fraction_static": 0.9}),
    ]
    defaults = space_check("vllm", {"max_num_seqs": [4, 8]}, engines={"sglang": {}}, model_format="hf")
    assert defaults.size() == 3 and list(defaults.candidates())[1] == Candidate("sglang", {})  # its turn: second
    assert "SGLang: its defaults" in defaults.describe()
    # One engine at its defaults alone is one candidate: no search.
    with pytest.raises(TuningInputError, match="at least two candidates"):
        space_check("vllm", {}, engines={"sglang": {}}, model_format="hf")
    # A GGUF base (llama.cpp's) may try SGLang, which loads the GGUF file itself.
    gguf = space_check("llama.cpp", {"parallel": [1, 2]}, engines={"sglang": {}}, model_format="gguf")
    assert [c.engine for c in gguf.candidates()] == ["llama.cpp", "sglang", "llama.cpp"]


@pytest.mark.parametrize(
    ("base", "engines", "model_format", "installed", "words"),
    [
        # llama.cpp's GGUF: Ollama serves its own tags only (vLLM and SGLang read a .gguf: allowed).
        ("llama.cpp", {"ollama": {"num_parallel": [1, 2]}}, "gguf", None, "Ollama cannot load a GGUF file"),
        # An HF checkpoint: llama.cpp reads GGUF files only; Ollama serves its own tags.
        ("vllm", {"llama.cpp": {"parallel": [1, 2]}}, "hf", None, "llama.cpp cannot load a Hugging Face checkpoint"),
        ("vllm", {"ollama": {"num_parallel": [1, 2]}}, "hf", None, "Ollama cannot load a Hugging Face checkpoint"),
        ("vllm", {"sglang": {"max_running_requests": [4, 8]}}, "hf", {"vllm"}, "SGLang is not installed on the host"),
        ("vllm", {"tgi": {"max_batch_size": [4, 8]}}, "hf", None, "unknown engine 'tgi'"),
        ("vllm", {"vllm": {"max_num_seqs": [4, 8]}}, "hf", None, "vLLM is the base's engine"),
        # Another engine's knobs are checked by its own specs: vLLM's knob is no SGLang knob.
        ("vllm", {"sglang": {"max_num_seqs": [4, 8]}}, "hf", BOTH, "SGLang has no knob 'max_num_seqs'"),
        ("vllm", {"sglang": {"max_running_requests": [0, 8]}}, "hf", BOTH, "SGLang: "),
        ("vllm", {"sglang": {"max_running_requests": [8, 8]}}, "hf", BOTH, "SGLang: max_running_requests lists"),
        ("vllm", {"sglang": ["max_running_requests"]}, "hf", BOTH, "give its knobs as {knob: [values]}"),
    ],
)
def test_an_engine_the_base_cannot_run_is_refused_naming_it_and_why(base, engines, model_format, installed, words):
    space = {"max_num_seqs": [4, 8]} if base == "vllm" else {"parallel": [1, 2]}
    with pytest.raises(TuningInputError) as exc:
        space_check(base, space, engines=engines, model_format=model_format, installed=installed)
    (engine,) = engines
    assert words in str(exc.value) and exc.value.field == f"engines.{engine}"


def test_the_sampler_takes_the_engine_as_one_more_dimension_and_leans_to_the_one_that_pays():
    space = space_check(
        "vllm",
        {"max_num_seqs": [1, 2, 4, 8, 16, 32], "enable_prefix_caching": [True, False]},
        engines={
            "sglang": {"max_running_requests": [1, 2, 4, 8, 16, 32], "mem_fraction_static": [0.8, 0.85, 0.9, 0.95]}
        },
        model_format="hf",
        installed=BOTH,
    )
    assert space.size() == 12 + 24  # above EXHAUSTIVE_MAX: sampled

    def search(seed: int) -> list[Tried]:
        tried: list[Tried] = []
        for i in range(20):
            found = next_candidate(space, tried, seed=seed)
            assert found is not None and space.contains(found)
            # SGLang is what pays here: the sampler is told so.
            value = (100.0 if found.engine == "sglang" else 10.0) + i * 0.01
            tried.append(Tried(found.knobs, value=value, engine=found.engine))
        return tried

    for seed in (0, 5, 9):
        tried = search(seed)
        assert len({(t.engine, tuple(sorted(t.knobs.items()))) for t in tried}) == 20  # never twice, across engines
        engines = [t.engine for t in tried]
        assert set(engines[:10]) == {"vllm", "sglang"}  # its random start-up tries both engines
        assert engines[10:].count("sglang") > engines[10:].count("vllm")  # then it leans to the one that paid
    # Rebuilt from the same trials (seed 9's), it asks the same: a restart resumes it.
    again: list[Tried] = []
    for t in tried:
        assert next_candidate(space, again, seed=9) == Candidate(t.engine, t.knobs)
        again.append(t)

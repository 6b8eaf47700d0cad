"""Revision diffs: seed 2's own generation change (Qwen3.6-35B-A3B AWQ -> Qwen3.8-27B W4A16)
must read like the seed's "Aspect | Old | New" table; knobs, env, secrets, planner,
benchmarks and the command line diff like a code review. Pure: no database."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from serving.diffing import (
    MASK,
    RevisionView,
    diff_revisions,
    is_secret_name,
    parse_argv,
    render_text,
    served_context,
)

GB = 1000**3

# Facts exactly as seed 2 states them (its table, §1-2 and the sources list).
OLD_MODEL: dict[str, Any] = {
    "name": "Qwen3.6-35B-A3B-AWQ-4bit",
    "repo_id": "cyankiwi/Qwen3.6-35B-A3B-AWQ-4bit",
    "generation": "Qwen3.6",
    "format": "hf",
    "quantization": "awq-int4",
    "quant_method": "awq",
    "weights_bytes": 20 * GB,
    "min_engine_versions": {},
    "tool_call_parser": "qwen3_coder",
    "reasoning_parser": "qwen3",
    "arch": {
        "params_total": 35_000_000_000,
        "params_active": 3_000_000_000,
        "num_layers": 40,
        "full_attention_layers": 10,
        "linear_attention_layers": 30,
        "num_experts": 256,
        "num_kv_heads": 2,
        "native_context": 262144,
        "has_vision": True,
        "has_mtp": True,
    },
}
NEW_MODEL: dict[str, Any] = {
    "name": "Qwen3.8-27B-W4A16-AWQ",
    "repo_id": "philbert440/Qwen3.8-27B-W4A16-AWQ",
    "generation": "Qwen3.8",
    "format": "hf",
    "quantization": "w4a16",
    "quant_method": "compressed-tensors",
    "weights_bytes": int(19.5 * GB),
    "min_engine_versions": {"vllm": "0.17"},
    "tool_call_parser": "qwen3_coder",
    "reasoning_parser": "qwen3",
    "arch": {
        "params_total": 27_000_000_000,
        "params_active": 27_000_000_000,
        "num_layers": 64,
        "full_attention_layers": 16,
        "linear_attention_layers": 48,
        "num_kv_heads": 4,
        "native_context": 262144,
        "has_vision": True,
        "has_mtp": True,
    },
}

OLD = RevisionView(
    number=3,
    tag="vllm_Qwen3.6-35B-A3B-AWQ-4bit",
    engine="vllm",
    engine_version="0.22.0",
    served_name="Qwen3.6-35B-A3B-AWQ-4bit",
    port=8001,
    knobs={
        "tensor_parallel_size": 2,
        "max_model_len": 65536,
        "max_num_seqs": 8,
        "quantization": "awq_marlin",
        "kv_cache_dtype": "fp8",
        "gpu_memory_utilization": 0.95,
        "enforce_eager": True,
        "tool_call_parser": "qwen3_coder",
        "log_level": "info",
    },
    env={"NCCL_P2P_DISABLE": "1", "HF_TOKEN": "hf_oldsecretvalue123"},
    hf_token_secret="hf-read",
    message="feat: switch to Qwen3.6-35B-A3B-AWQ-4bit",
    author="tm",
    created_at="2026-07-02T10:00:00+00:00",
    model=OLD_MODEL,
)
NEW = replace(
    OLD,
    number=4,
    tag="",
    served_name="Qwen3.8-27B-W4A16-AWQ",
    knobs={
        "tensor_parallel_size": 2,
        "max_model_len": 262144,
        "max_num_seqs": 4,
        "kv_cache_dtype": "fp8",
        "gpu_memory_utilization": 0.95,
        "enforce_eager": True,
        "tool_call_parser": "qwen3_coder",
        "log_level": "debug",
    },
    env={"NCCL_P2P_DISABLE": "1", "HF_TOKEN": "hf_newsecretvalue456"},
    model=NEW_MODEL,
)


def test_same_revision_has_no_changes_and_no_model_table():
    diff = diff_revisions(OLD, OLD)
    assert not diff.has_changes
    assert diff.section("model") is None
    assert render_text(diff).splitlines()[-1] == "No changes."


# The seed's table, row for row (Aspect, Old, New, changed?).
SEED_TABLE = [
    ("Generation", "Qwen3.6", "Qwen3.8", True),
    (
        "Architecture",
        "Hybrid MoE: 40 layers (30 linear + 10 full attn), 256 experts",
        "Hybrid dense: 64 layers (48 linear + 16 full attn)",
        True,
    ),
    ("Parameters", "35B total, ~3B active", "27B, all active", True),
    ("Layer split", "30 linear + 10 full attn", "48 linear + 16 full attn", True),
    ("Active KV heads", "2 KV heads x 10 full-attn layers", "4 KV heads x 16 full-attn layers", True),
    ("Native context", "262,144", "262,144", False),
    ("Context served", "65,536", "262,144", True),
    ("Vision", "vision-language", "vision-language", False),
    ("MTP head", "yes", "yes", False),
    ("Quantization", "AWQ INT4 (awq_marlin flag)", "compressed-tensors W4A16 (auto-detected)", True),
    ("Weights on disk", "~20 GB", "~19.5 GB", True),
    ("vLLM minimum", "any", ">= 0.17", True),
    ("Tool-call parser", "qwen3_coder", "qwen3_coder", False),
    ("Reasoning parser", "qwen3", "qwen3", False),
]


@pytest.mark.parametrize(("aspect", "old", "new", "changed"), SEED_TABLE, ids=[r[0] for r in SEED_TABLE])
def test_model_generation_table_matches_the_seed(aspect, old, new, changed):
    diff = diff_revisions(OLD, NEW)
    assert diff.model_changed
    table = diff.section("model")
    assert table.headers == ("Aspect", "Old", "New")
    row = table.row(aspect)
    assert (row.old, row.new, row.changed) == (old, new, changed)


def test_model_table_gives_the_seeds_ratios():
    table = diff_revisions(OLD, NEW).section("model")
    # like with like: total with total (35B -> 27B), active with active (~3B -> 27B, "up ~9x");
    # a bare "x9.0" beside "35B total" and "27B" read as a total ratio (the bug)
    assert table.row("Parameters").note == "total -23%, active x9.0"
    assert table.row("Context served").note == "x4.0"  # "the served window quadruples"


@pytest.mark.parametrize(
    ("key", "old", "new", "kind", "note"),
    [
        ("max_num_seqs", "8", "4", "changed", "-50%"),
        ("quantization", "awq_marlin", "–", "removed", ""),
        ("max_model_len", "65536", "262144", "changed", "x4.0"),
        ("tensor_parallel_size", "2", "2", "same", ""),
    ],
)
def test_knob_rows(key, old, new, kind, note):
    row = diff_revisions(OLD, NEW).section("knobs").row(key)
    assert (row.old, row.new, row.kind, row.note) == (old, new, kind, note)


def test_knobs_are_sorted_and_noise_is_dropped():
    knobs = diff_revisions(OLD, NEW).section("knobs")
    keys = [r.key for r in knobs]
    assert keys == sorted(keys)
    assert "log_level" not in keys  # changed info -> debug, but it is noise


def test_knob_values_compare_by_meaning_not_spelling():
    a = replace(OLD, knobs={"max_model_len": 65536, "enforce_eager": True})
    b = replace(OLD, knobs={"max_model_len": "65536", "enforce_eager": "true"})
    assert not diff_revisions(a, b).section("knobs").has_changes


def test_added_knob_and_its_row_kind():
    b = replace(NEW, knobs={**NEW.knobs, "speculative_config": {"method": "mtp", "num_speculative_tokens": 2}})
    row = diff_revisions(NEW, b).section("knobs").row("speculative_config")
    assert row.kind == "added" and row.old == "–"
    assert row.new == '{"method":"mtp","num_speculative_tokens":2}'
    assert (row.marker, row.css_class) == ("+", "diff-added")


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("HF_TOKEN", True),
        ("OPENAI_API_KEY", True),
        ("my_secret", True),
        ("DB_PASSWORD", True),
        ("NCCL_P2P_DISABLE", False),
        ("CUDA_VISIBLE_DEVICES", False),
        ("VLLM_ATTENTION_BACKEND", False),
    ],
)
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


def test_env_secret_values_never_show_but_a_change_does():
    diff = diff_revisions(OLD, NEW)
    row = diff.section("env").row("HF_TOKEN")
    assert (row.old, row.new, row.kind, row.note) == (MASK, MASK, "changed", "value changed")
    text = render_text(diff, show_same=True)
    blob = text + repr(diff.to_dict())
    assert "hf_oldsecretvalue123" not in blob and "hf_newsecretvalue456" not in blob
    assert diff.section("env").row("NCCL_P2P_DISABLE").new == "1"  # plain values stay readable


def test_secrets_section_names_the_secrets_only():
    b = replace(NEW, api_key_secret="panel-key")
    row = diff_revisions(OLD, b).section("secrets").row("api_key_secret")
    assert (row.old, row.new, row.kind) == ("–", "panel-key", "added")


def test_general_section_shows_the_served_name_clients_must_change():
    row = diff_revisions(OLD, NEW).section("general").row("served_name")
    assert (row.old, row.new) == ("Qwen3.6-35B-A3B-AWQ-4bit", "Qwen3.8-27B-W4A16-AWQ")


def test_no_model_table_when_only_knobs_changed():
    diff = diff_revisions(OLD, replace(OLD, knobs={**OLD.knobs, "max_num_seqs": 4}))
    assert diff.section("model") is None and not diff.model_changed


def fit(kv_per_gpu, pool, full_len, one_seq, weights, findings=()):
    return {
        "kv_bytes_per_token_per_gpu": kv_per_gpu,
        "kv_pool_tokens": pool,
        "max_concurrent_full_length": full_len,
        "max_context_one_sequence": one_seq,
        "weights_bytes_per_gpu": weights,
        "findings": [{"severity": s, "code": c, "message": m, "fix": ""} for s, c, m in findings],
    }


@pytest.mark.parametrize(
    ("figure", "old", "new", "note", "better"),
    [
        # 2 KV heads x 10 layers -> 4 x 16 at fp8, TP=2: "KV cost per token rose ~3.2x"
        ("KV bytes per token per GPU", "2.5 KiB", "8 KiB", "x3.2", False),
        ("KV pool tokens", "310,000", "1,050,000", "x3.4", True),
        ("Full-length sequences that fit", "1", "4", "x4.0", True),
        ("Weights per GPU", "9.31 GiB", "8.85 GiB", "-5%", True),
    ],
)
def test_planner_deltas(figure, old, new, note, better):
    a = replace(OLD, planner=fit(2560, 310_000, 1, 65536, 10_000_000_000, [("warning", "kv.concurrency_short", "1")]))
    b = replace(NEW, planner=fit(8192, 1_050_000, 4, 262144, 9_500_000_000))
    row = diff_revisions(a, b).section("planner").row(figure)
    assert (row.old, row.new, row.note, row.better) == (old, new, note, better)


def test_planner_findings_added_and_removed_by_code():
    a = replace(OLD, planner=fit(1, 1, 1, 1, 1, [("warning", "kv.concurrency_short", "only 1 full-length sequence")]))
    b = replace(NEW, planner=fit(1, 1, 1, 1, 1, [("info", "mtp.cost", "MTP head costs 0.85 GiB")]))
    section = diff_revisions(a, b).section("planner")
    assert section.row("finding kv.concurrency_short").kind == "removed"
    added = section.row("finding mtp.cost")
    assert added.kind == "added" and added.new == "info: MTP head costs 0.85 GiB"


def test_a_cpu_only_hosts_planner_section_speaks_of_its_memory_not_gpus():
    cpu = {**fit(2560, 310_000, 1, 65536, 300_000_000), "gpus_present": 0, "gpus_used": 1}
    section = diff_revisions(
        replace(OLD, planner=cpu), replace(NEW, planner={**cpu, "kv_pool_tokens": 620_000})
    ).section("planner")
    assert section.title == "Planner: fit in the host's memory (CPU only)"
    labels = [row.key for row in section.rows]
    assert "Weights" in labels and "KV pool tokens" in labels
    assert not [label for label in labels if "GPU" in label]


def test_planner_missing_on_one_side_reads_unknown():
    b = replace(NEW, planner=fit(8192, 1_050_000, 4, 262144, 9_750_000_000))
    row = diff_revisions(OLD, b).section("planner").row("KV pool tokens")
    assert (row.old, row.new) == ("unknown", "1,050,000")


def run(profile, tok_s, rps, ttft50, ttft99, tpot50, j_per_tok, status="completed"):
    level = {
        "label": "c=4",
        "concurrency": 4,
        "output_tokens_per_s": tok_s,
        "requests_per_s": rps,
        "ttft_ms": {"mean": None, "p50": ttft50, "p90": None, "p99": ttft99},
        "tpot_ms": {"mean": None, "p50": tpot50, "p90": None, "p99": None},
    }
    return {"profile_name": profile, "status": status, "levels": [level], "joules_per_output_token": j_per_tok}


@pytest.mark.parametrize(
    ("metric", "old", "new", "note", "better"),
    [
        ("c=4 output tok/s", "300.0", "165.0", "-45%", False),
        ("c=4 requests/s", "1.20", "0.66", "-45%", False),
        ("c=4 TTFT p50 ms", "200.0", "260.0", "+30%", False),
        ("c=4 TTFT p99 ms", "900.0", "800.0", "-11%", True),
        ("c=4 TPOT p50 ms", "12.00", "24.00", "x2.0", False),
        ("energy J/output token", "0.800", "2.000", "x2.5", False),
    ],
)
def test_benchmark_deltas_per_level(metric, old, new, note, better):
    a = replace(OLD, benchmarks=(run("agent-4", 300.0, 1.2, 200, 900, 12.0, 0.8),))
    b = replace(NEW, benchmarks=(run("agent-4", 165.0, 0.66, 260, 800, 24.0, 2.0),))
    row = diff_revisions(a, b).section("benchmark:agent-4").row(metric)
    assert (row.old, row.new, row.note, row.better) == (old, new, note, better)


def test_benchmarks_compare_only_shared_profiles_and_latest_completed_runs():
    a = replace(OLD, benchmarks=(run("chat", 100.0, 1, 1, 1, 1, 1), run("solo", 50.0, 1, 1, 1, 1, 1)))
    b = replace(
        NEW,
        benchmarks=(
            run("chat", 1.0, 1, 1, 1, 1, 1, status="engine_died"),  # newest, but it died
            run("chat", 120.0, 1, 1, 1, 1, 1),
            run("chat", 10.0, 1, 1, 1, 1, 1),  # older
        ),
    )
    diff = diff_revisions(a, b)
    assert [s.key for s in diff if s.key.startswith("benchmark:")] == ["benchmark:chat"]
    assert diff.section("benchmark:chat").row("c=4 output tok/s").new == "120.0"


def test_benchmark_results_nested_under_results_are_read():
    a = replace(OLD, benchmarks=({"profile_name": "chat", "results": run("chat", 10.0, 1, 1, 1, 1, 1)},))
    b = replace(NEW, benchmarks=({"profile_name": "chat", "results": run("chat", 20.0, 1, 1, 1, 1, 1)},))
    assert diff_revisions(a, b).section("benchmark:chat").row("c=4 output tok/s").note == "x2.0"


def test_command_line_diff_is_flag_level():
    a = replace(
        OLD, argv=("vllm", "serve", "m", "--max-model-len", "65536", "--quantization", "awq_marlin", "-tp", "2")
    )
    b = replace(NEW, argv=("vllm", "serve", "m", "--max-model-len", "262144", "-tp", "2", "--enforce-eager"))
    rows = {r.key: r for r in diff_revisions(a, b).section("argv")}
    assert (rows["--max-model-len"].kind, rows["--max-model-len"].new) == ("changed", "262144")
    assert rows["--quantization"].kind == "removed"
    assert (rows["--enforce-eager"].kind, rows["--enforce-eager"].new) == ("added", "on")
    assert rows["-tp"].kind == "same"
    assert rows["(command)"].new == "vllm serve m"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["llama-server", "--parallel", "-1"], {"(command)": "llama-server", "--parallel": "-1"}),
        (["vllm", "serve", "m", "--port=8001"], {"(command)": "vllm serve m", "--port": "8001"}),
        (["sglang", "--api-key", "sk-real-key"], {"(command)": "sglang", "--api-key": MASK}),
        (["env", "HF_TOKEN=hf_real", "vllm"], {"(command)": f"env HF_TOKEN={MASK} vllm"}),
    ],
)
def test_parse_argv(argv, expected):
    assert parse_argv(argv) == expected


def test_render_text_marks_and_aligns():
    text = render_text(diff_revisions(OLD, NEW))
    assert text.startswith("diff r3 (vllm_Qwen3.6-35B-A3B-AWQ-4bit) -> r4\n")
    lines = text.splitlines()
    assert "~ max_num_seqs   8           4       -50%" in lines
    assert "- quantization   awq_marlin  –" in lines
    # the model table keeps unchanged aspects, the way the seed's table does
    assert any(line.startswith("  Tool-call parser  qwen3_coder") for line in lines)
    # columns line up under their headers
    knobs = lines[lines.index("== Knobs ==") + 1 :][:4]
    header, rows = knobs[0], knobs[1:]
    old_col, new_col = header.index("Old"), header.index("New")
    assert [r[old_col:].split()[0] for r in rows] == ["65536", "8", "awq_marlin"]
    assert [r[new_col:].split()[0] for r in rows] == ["262144", "4", "–"]


@pytest.mark.parametrize(
    ("data",),
    [
        ({},),
        ({"number": 1, "engine": "vllm", "model": None, "knobs": None, "env": None, "benchmarks": None},),
        ({"number": 2, "model": {"name": "x", "arch": {"num_layers": None}}, "planner": {"findings": None}},),
    ],
)
def test_unknown_facts_never_crash(data):
    diff = diff_revisions(RevisionView.from_dict(data), NEW)
    table = diff.section("model")
    assert table.row("Architecture").old == "unknown"
    assert table.row("Weights on disk").old == "unknown"
    assert render_text(diff)


@pytest.mark.parametrize(
    ("engine", "knobs", "env", "total", "per_sequence"),
    [
        ("vllm", {"max_model_len": 65536}, {}, 65536, 65536),
        ("vllm", {"max_model_len": "64K"}, {}, 65536, 65536),
        ("vllm", {}, {}, 262144, 262144),  # unset: the model's native window
        ("sglang", {"context_length": 32768}, {}, 32768, 32768),
        ("llama.cpp", {"ctx_size": 262144}, {}, 262144, 262144),
        ("llama.cpp", {"ctx_size": 65536, "parallel": 4}, {}, 65536, 16384),  # split between slots
        ("llama.cpp", {"ctx_size": 65536, "parallel": 4, "kv_unified": True}, {}, 65536, 65536),
        ("llama.cpp", {"ctx_size": 0}, {}, 262144, 262144),
        ("llama.cpp", {}, {}, None, None),  # -fit chooses at start
        ("ollama", {"context_length": 32768}, {}, 32768, 32768),
        ("ollama", {}, {"OLLAMA_CONTEXT_LENGTH": "8192"}, 8192, 8192),
        ("ollama", {}, {}, None, None),  # picked from VRAM
    ],
)
def test_served_context(engine, knobs, env, total, per_sequence):
    ctx = served_context(engine, knobs, native=262144, env=env)
    assert (ctx.total, ctx.per_sequence) == (total, per_sequence)

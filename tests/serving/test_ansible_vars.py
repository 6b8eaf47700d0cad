"""Ansible group_vars import/export (shared/reference/ansible-vars.md) and the seed's
start script vs the vLLM adapter, flag for flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serving.ansible_role import RoleInput
from serving.ansible_vars import AnsibleVarsError, parse_group_vars, render_group_vars
from serving.engines.base import EngineConfig
from serving.engines.vllm import VllmAdapter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ansible"
GROUP_VARS = (FIXTURES / "all.yml").read_text()
EXPECTED = json.loads((FIXTURES / "expected_vllm_argv.json").read_text())


def flag_pairs(argv: list[str] | tuple[str, ...]) -> set[tuple[str, str | None]]:
    """Order-insensitive view of an argv: {(flag, value-or-None)} plus positionals."""
    out: set[tuple[str, str | None]] = set()
    args = list(argv[1:])  # the executable differs (role venv vs adapter default)
    i = 0
    while i < len(args):
        if args[i].startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out.add((args[i], args[i + 1]))
            i += 2
        else:
            out.add((args[i], None))
            i += 1
    return out


def launch_from_import(version: str):
    imported = parse_group_vars(GROUP_VARS, engine_version=version)
    config = EngineConfig(
        engine=imported.engine,
        engine_version=version,
        model=imported.model,
        served_name=imported.served_name,
        host=imported.host or "0.0.0.0",
        port=imported.port or 8000,
        knobs=imported.knobs,
        env=imported.env,
        binary="/opt/vllm/venv/bin/vllm",
    )
    return VllmAdapter().launch_spec(config)


def test_import_reads_the_seed_setup():
    imported = parse_group_vars(GROUP_VARS)
    assert imported.engine == "vllm"
    assert imported.model == "philbert440/Qwen3.8-27B-W4A16-AWQ"
    assert imported.served_name == "Qwen3.8-27B-W4A16-AWQ"
    assert imported.port == 8001
    assert imported.knobs["gpu_memory_utilization"] == 0.95
    assert imported.knobs["max_model_len"] == 262144
    # The script's rules: "none" quantization, PP 1, offload 0, empty spec config -> no knob.
    for absent in (
        "quantization",
        "pipeline_parallel_size",
        "cpu_offload_gb",
        "speculative_config",
        "hf_overrides",
    ):
        assert absent not in imported.knobs
    assert imported.unknown == {"vllm_min_version": "0.17"}
    assert "open_webui_port" in imported.ignored_known
    assert "ollama_models" in imported.ignored_known  # the stopped engine
    assert imported.ignored_known["vllm_user"] == "{{ ansible_user }}"  # Jinja kept as text
    assert imported.secrets == ()
    VllmAdapter().validate(EngineConfig(engine="vllm", engine_version="", model=imported.model, knobs=imported.knobs))


def test_seed_script_and_adapter_agree_flag_for_flag_on_old_vllm():
    # Before 0.13 the attention backend is the env var, exactly as the script sets it.
    spec = launch_from_import("0.12.0")
    assert spec.argv[0] == EXPECTED["argv"][0]
    assert flag_pairs(spec.argv) == flag_pairs(EXPECTED["argv"])
    assert spec.env == EXPECTED["env"]


def test_while_vllm_still_honours_the_attention_variable_the_import_keeps_it():
    # 0.13 to 0.26: VLLM_ATTENTION_BACKEND is deprecated but honoured, exactly as the script sets it.
    spec = launch_from_import("0.22.0")
    assert flag_pairs(spec.argv) == flag_pairs(EXPECTED["argv"])
    assert spec.env == EXPECTED["env"]


def test_on_the_vllm_the_role_installs_the_ignored_attention_variable_sets_nothing():
    # The role installs vllm>=0.17.0, i.e. the newest release, which ignores VLLM_ATTENTION_BACKEND
    # (gone since 0.26): the revision runs what the role's vLLM runs, and says so.
    imported = parse_group_vars(GROUP_VARS)
    assert imported.engine_version == "0.33.0"
    assert "attention_backend" not in imported.knobs and "VLLM_ATTENTION_BACKEND" not in imported.env
    assert imported.ignored_known["vllm_attention_backend"] == "TRITON_ATTN"  # written back on export
    assert any("ignores" in w and "--attention-backend" in w for w in imported.warnings)
    spec = launch_from_import("0.33.0")
    assert flag_pairs(spec.argv) == flag_pairs(EXPECTED["argv"])
    assert spec.env == {k: v for k, v in EXPECTED["env"].items() if k != "VLLM_ATTENTION_BACKEND"}


def test_variables_the_group_vars_leave_out_take_the_role_defaults():
    """The role renders its defaults for what group_vars omit; an import runs the same."""
    imported = parse_group_vars("inference_engine: vllm\nvllm_model: Qwen/Qwen3-32B-AWQ\n", engine_version="0.22.0")
    assert imported.knobs["max_model_len"] == 262144 and imported.knobs["max_num_batched_tokens"] == 4096
    assert imported.env["HF_HOME"] == imported.env["HUGGINGFACE_HUB_CACHE"] == "/opt/vllm/hf_cache"
    assert imported.env["VLLM_ATTENTION_BACKEND"] == "TRITON_ATTN"
    assert imported.port == 8001 and imported.host == "0.0.0.0"
    assert any("role's defaults apply" in w and "vllm_max_model_len=262144" in w for w in imported.warnings)


def test_export_round_trips_and_keeps_unknown_and_ignored_variables():
    imported = parse_group_vars(GROUP_VARS)
    exported = render_group_vars(
        imported.engine,
        RoleInput(
            model=imported.model,
            knobs=imported.knobs,
            env=imported.env,
            host=imported.host,
            port=imported.port,
            preserved=imported.preserved(),
        ),
    )
    # The newest vLLM ignores the role's VLLM_ATTENTION_BACKEND: the only difference, and said.
    assert list(exported.not_exported) == ["VLLM_ATTENTION_BACKEND"]
    again = parse_group_vars(exported.text)
    assert again.knobs == imported.knobs
    assert again.env == imported.env
    assert again.unknown == imported.unknown
    assert again.ignored_known == imported.ignored_known
    assert "'{{ ansible_user }}'" in exported.text
    assert "vllm_gpu_memory_utilization: '0.95'" in exported.text


def test_secrets_are_named_never_copied():
    text = GROUP_VARS.replace('vllm_api_key: ""', 'vllm_api_key: "sk-live-123"').replace(
        'vllm_hf_token: ""', 'vllm_hf_token: "{{ vault_hf_token }}"'
    )
    imported = parse_group_vars(text)
    assert {(s.variable, s.purpose, s.templated) for s in imported.secrets} == {
        ("vllm_api_key", "api_key", False),
        ("vllm_hf_token", "hf_token", True),
    }
    assert "sk-live-123" not in repr(imported)
    exported = render_group_vars(
        "vllm",
        RoleInput(
            model=imported.model,
            knobs=imported.knobs,
            env=imported.env,
            preserved=imported.preserved(),
        ),
    ).text
    assert "sk-live-123" not in exported
    assert "vault_hf_token" in exported  # a vault reference is not a value: kept


def test_jinja_in_a_knob_variable_is_kept_as_text_not_evaluated():
    imported = parse_group_vars(GROUP_VARS.replace("vllm_max_num_seqs: 4", 'vllm_max_num_seqs: "{{ seqs | int }}"'))
    assert "max_num_seqs" not in imported.knobs
    assert imported.templated == {"vllm_max_num_seqs": "{{ seqs | int }}"}
    exported = render_group_vars(
        "vllm",
        RoleInput(
            model=imported.model,
            knobs=imported.knobs,
            env=imported.env,
            preserved=imported.preserved(),
        ),
    )
    # Issue 11: it used to be written back live, for Ansible to evaluate; now it is inert text
    # (only plain references such as {{ ansible_user }} stay live; test_ansible_hostile.py).
    assert "vllm_max_num_seqs: !unsafe '{{ seqs | int }}'" in exported.text
    assert exported.inert == ("vllm_max_num_seqs",)


def test_script_rules_for_optional_flags():
    text = (
        GROUP_VARS.replace('vllm_quantization: "none"', "vllm_quantization: awq_marlin")
        .replace("vllm_pipeline_parallel_size: 1", "vllm_pipeline_parallel_size: 2")
        .replace("vllm_cpu_offload_gb: 0", "vllm_cpu_offload_gb: 8")
        .replace("vllm_kv_cache_dtype: fp8", "vllm_kv_cache_dtype: auto")
        .replace('vllm_rope_scaling: ""', 'vllm_rope_scaling: \'{"rope_type":"yarn","factor":4.0}\'')
        .replace(
            'vllm_speculative_config: ""',
            'vllm_speculative_config: \'{"method":"mtp","num_speculative_tokens":2}\'',
        )
        .replace("vllm_max_num_batched_tokens: 4096\n", "")
    )
    knobs = parse_group_vars(text).knobs
    assert knobs["quantization"] == "awq_marlin"
    assert knobs["pipeline_parallel_size"] == 2
    assert knobs["cpu_offload_gb"] == 8
    assert "kv_cache_dtype" not in knobs
    assert knobs["max_num_batched_tokens"] == 4096  # left out: the role's defaults define it
    assert knobs["hf_overrides"] == {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    assert knobs["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 2}


def test_ollama_engine_import():
    text = GROUP_VARS.replace("inference_engine: vllm", "inference_engine: ollama")
    imported = parse_group_vars(text)
    assert imported.engine == "ollama"
    assert imported.model == imported.served_name == "qwen3.8:27b"
    assert imported.engine_version == "0.12.3"
    assert imported.port == 11434
    assert imported.knobs == {"num_parallel": 2, "keep_alive": "30m", "context_length": 32768}
    assert "vllm_model" in imported.ignored_known


def test_not_a_mapping_is_an_error():
    with pytest.raises(AnsibleVarsError):
        parse_group_vars("- just\n- a list\n")

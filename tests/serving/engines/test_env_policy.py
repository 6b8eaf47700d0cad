"""The environment a revision may hand an engine: an allowlist per engine (and version), with
every value checked; variables that load code or move flags out of sight are refused."""

from __future__ import annotations

import pytest

from serving.engines.base import EngineConfig, EngineConfigError
from serving.engines.envpolicy import allowed_names, classify_env
from serving.engines.registry import get_adapter

MODELS = {"vllm": "Qwen/Qwen3-8B", "llama.cpp": "/models/q.gguf", "ollama": "qwen3:8b", "sglang": "Qwen/Qwen3-8B"}
ENGINES = list(MODELS)


def config(engine: str, env: dict[str, str], version: str = "") -> EngineConfig:
    return EngineConfig(engine=engine, engine_version=version, model=MODELS[engine], env=env)


REFUSED = [
    ("LLAMA_ARG_STATIC_PATH", "/", "set the knob"),  # llama-server would serve / over HTTP
    ("LLAMA_ARG_MODEL", "/etc/shadow", "set the knob"),
    ("LD_PRELOAD", "/tmp/evil.so", "load code"),
    ("LD_LIBRARY_PATH", "/tmp", "load code"),
    ("PATH", "/tmp/bin", "which programs"),
    ("PYTHONPATH", "/tmp", "load code"),
    ("PYTHONSTARTUP", "/tmp/x.py", "load code"),
    ("VLLM_PLUGINS", "evil", "load code"),
    ("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "1", "adapters"),
    ("NCCL_NET_PLUGIN", "/tmp/x.so", "shared object"),
    ("NCCL_TOPO_FILE", "/etc/passwd", "file"),
    ("NCCL_DEBUG_FILE", "/tmp/out", "file"),
    ("HF_TOKEN", "hf_xxx", "secret"),
    ("VLLM_API_KEY", "k", "secret"),
    ("OLLAMA_HOST", "0.0.0.0:1", "panel sets"),
    ("CONTROLPANEL_ENGINE_OWNER", "/var/lib/other-panel", "panel's own setting"),  # would disguise an engine
    ("CONTROLPANEL_URL", "http://evil", "panel's own setting"),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("name", "value", "why"), REFUSED)
def test_refused_for_everyone_with_a_reason(engine, name, value, why):
    with pytest.raises(EngineConfigError) as exc:
        get_adapter(engine).validate(config(engine, {name: value}))
    assert exc.value.field == "env"
    assert name in str(exc.value) and why in str(exc.value)


@pytest.mark.parametrize(
    ("engine", "name", "value"),
    [
        ("vllm", "CUDA_VISIBLE_DEVICES", "0,1"),
        ("vllm", "NCCL_P2P_DISABLE", "1"),
        ("vllm", "PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
        ("vllm", "VLLM_SKIP_P2P_CHECK", "0"),
        ("sglang", "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "false"),
        ("llama.cpp", "GGML_CUDA_ENABLE_UNIFIED_MEMORY", "1"),
        ("ollama", "OLLAMA_DEBUG", "1"),
        ("ollama", "CUDA_VISIBLE_DEVICES", "GPU-5d6a3c1e-0000-1111-2222-333344445555"),
    ],
)
def test_documented_variables_are_allowed_to_anyone(engine, name, value):
    adapter = get_adapter(engine)
    assert adapter.concerns(config(engine, {name: value})) == [c for c in adapter.concerns(config(engine, {}))]


@pytest.mark.parametrize(
    ("engine", "name", "value", "why"),
    [
        ("vllm", "CUDA_VISIBLE_DEVICES", "0;rm -rf /", "GPU indices"),
        ("vllm", "NCCL_P2P_DISABLE", "1 /tmp/x", "letters, digits"),
        ("vllm", "NCCL_SOCKET_IFNAME", "../../etc", "letters, digits"),
        ("vllm", "OMP_NUM_THREADS", "9" * 50, "whole number"),
        ("vllm", "VLLM_SKIP_P2P_CHECK", "maybe", "0 or 1"),
        ("vllm", "HF_HOME", "relative/cache", "absolute path"),
        ("vllm", "CUDA_VISIBLE_DEVICES", "0\n1", "single line"),
        ("vllm", "CUDA_VISIBLE_DEVICES", "0\x00", "single line"),
        ("ollama", "OLLAMA_LOAD_TIMEOUT", "forever", "duration"),
    ],
)
def test_allowed_variables_have_their_values_checked(engine, name, value, why):
    with pytest.raises(EngineConfigError) as exc:
        get_adapter(engine).validate(config(engine, {name: value}))
    assert why in str(exc.value)


def test_an_unknown_variable_needs_an_admin_and_says_so():
    concerns = get_adapter("vllm").concerns(config("vllm", {"HF_ENDPOINT": "https://mirror.lan", "MY_FLAG": "1"}))
    privileged = {c.field: c for c in concerns if c.kind == "privileged"}
    assert set(privileged) == {"env.HF_ENDPOINT", "env.MY_FLAG"}
    assert "only an admin" in privileged["env.MY_FLAG"].message


def test_cache_folders_are_paths_to_confine():
    concerns = get_adapter("vllm").concerns(config("vllm", {"HF_HOME": "/srv/models/hf"}))
    assert [(c.field, c.kind, c.path) for c in concerns] == [("env.HF_HOME", "path", "/srv/models/hf")]


def test_the_attention_backend_variable_depends_on_the_vllm_version():
    old = classify_env({"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, engine="vllm", engine_version="0.12.0")
    assert old[0].tier == "allowed"
    with pytest.raises(EngineConfigError, match="attention_backend knob"):
        classify_env({"VLLM_ATTENTION_BACKEND": "FLASHINFER"}, engine="vllm", engine_version="0.26.0")


def test_a_variable_of_another_engine_is_not_on_this_engines_list():
    decisions = classify_env({"VLLM_SKIP_P2P_CHECK": "1"}, engine="llama.cpp")
    assert decisions[0].tier == "admin"


def test_the_allowlist_is_published_per_engine_for_help_text():
    assert "CUDA_VISIBLE_DEVICES" in allowed_names("llama.cpp")
    assert "VLLM_SKIP_P2P_CHECK" not in allowed_names("llama.cpp")
    assert "NCCL_*" in allowed_names("vllm")

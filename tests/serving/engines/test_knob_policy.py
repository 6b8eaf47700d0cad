"""Knobs that open files, run code or carry numbers: what each engine's adapter flags, and
the ranges it enforces before anything reaches an engine."""

from __future__ import annotations

import pytest

from serving.engines.base import EngineConfig, EngineConfigError
from serving.engines.policy import check_paths_under
from serving.engines.registry import get_adapter

MODELS = {"vllm": "Qwen/Qwen3-8B", "llama.cpp": "/models/q.gguf", "ollama": "qwen3:8b", "sglang": "Qwen/Qwen3-8B"}


def concerns(engine: str, knobs: dict, *, model: str | None = None, version: str = "") -> list[tuple[str, str, str]]:
    cfg = EngineConfig(engine=engine, engine_version=version, model=model or MODELS[engine], knobs=knobs)
    return [(c.field, c.kind, c.path) for c in get_adapter(engine).concerns(cfg)]


@pytest.mark.parametrize(
    ("engine", "knobs", "expected"),
    [
        ("llama.cpp", {"mmproj": "/models/mmproj.gguf"}, ("mmproj", "path", "/models/mmproj.gguf")),
        ("llama.cpp", {"chat_template_file": "/models/t.jinja"}, ("chat_template_file", "path", "/models/t.jinja")),
        ("vllm", {"chat_template": "/models/t.jinja"}, ("chat_template", "path", "/models/t.jinja")),
        ("vllm", {"generation_config": "/models/gen"}, ("generation_config", "path", "/models/gen")),
        ("vllm", {"tokenizer": "/models/qwen3-8b"}, ("tokenizer", "path", "/models/qwen3-8b")),
        ("vllm", {"hf_config_path": "Qwen/Qwen3-8B"}, ("hf_config_path", "code", "")),
        ("vllm", {"trust_remote_code": True}, ("trust_remote_code", "code", "")),
        ("vllm", {"hf_overrides": {"auto_map": {"AutoConfig": "x--y.Z"}}}, ("hf_overrides", "code", "")),
        ("vllm", {"hf_overrides": {"text_config": {"_name_or_path": "evil/repo"}}}, ("hf_overrides", "code", "")),
        (
            "vllm",
            {"speculative_config": {"method": "eagle3", "model": "evil/draft"}},
            ("speculative_config", "code", ""),
        ),
        ("vllm", {"speculative_config": {"model": "/models/draft"}}, ("speculative_config", "path", "/models/draft")),
        ("sglang", {"trust_remote_code": True}, ("trust_remote_code", "code", "")),
        (
            "sglang",
            {"speculative_algorithm": "EAGLE", "speculative_draft_model_path": "other/draft"},
            ("speculative_draft_model_path", "code", ""),
        ),
        ("sglang", {"json_model_override_args": {"auto_map": {}}}, ("json_model_override_args", "code", "")),
        ("sglang", {"chat_template": "/models/t.jinja"}, ("chat_template", "path", "/models/t.jinja")),
        ("ollama", {"models": "/models/ollama"}, ("models", "path", "/models/ollama")),
    ],
)
def test_knobs_that_reach_beyond_serving_are_flagged(engine, knobs, expected):
    assert expected in concerns(engine, knobs)


@pytest.mark.parametrize(
    ("engine", "knobs"),
    [
        ("vllm", {"trust_remote_code": False, "max_model_len": 32768}),
        ("vllm", {"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}),  # inline, sandboxed
        ("vllm", {"generation_config": "vllm"}),
        ("vllm", {"hf_overrides": {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}}),
        ("vllm", {"speculative_config": {"method": "mtp", "num_speculative_tokens": 1}}),
        ("sglang", {"chat_template": "chatml"}),  # a built-in template
    ],
)
def test_ordinary_settings_raise_no_concern(engine, knobs):
    assert [c for c in concerns(engine, knobs) if c[0] != "model"] == []


@pytest.mark.parametrize(
    ("engine", "model", "expected"),
    [
        ("vllm", "Qwen/Qwen3-8B", []),
        ("vllm", "/models/Qwen3-8B-AWQ", [("model", "path", "/models/Qwen3-8B-AWQ")]),
        ("llama.cpp", "/models/q.gguf", [("model", "path", "/models/q.gguf")]),
        ("llama.cpp", "q.gguf", [("model", "path", "q.gguf")]),  # read inside the first model folder
        ("ollama", "qwen3:8b", []),
    ],
)
def test_the_model_itself_is_a_path_only_when_it_is_one(engine, model, expected):
    assert concerns(engine, {}, model=model) == expected


@pytest.mark.parametrize(
    ("engine", "knobs", "model", "field"),
    [
        ("llama.cpp", {"mmproj": "../../etc/passwd"}, None, "mmproj"),
        ("llama.cpp", {"mmproj": "/models/../etc/passwd"}, None, "mmproj"),
        ("llama.cpp", {"chat_template_file": "~/.ssh/id_rsa"}, None, "chat_template_file"),
        ("llama.cpp", {}, "models/sub/q.gguf", "model"),
        ("vllm", {}, "./Qwen3-8B", "model"),
        ("vllm", {"chat_template": "templates/t.jinja"}, None, "chat_template"),
    ],
)
def test_relative_and_dot_dot_paths_are_refused(engine, knobs, model, field):
    with pytest.raises(EngineConfigError) as exc:
        concerns(engine, knobs, model=model)
    assert exc.value.field == field


def test_paths_must_lie_under_the_hosts_model_folders():
    found = get_adapter("llama.cpp").concerns(
        EngineConfig(engine="llama.cpp", engine_version="", model="/models/q.gguf", knobs={"mmproj": "/etc/passwd"})
    )
    with pytest.raises(EngineConfigError) as exc:
        check_paths_under(found, ["/models"], host="lab")
    assert exc.value.field == "mmproj" and "outside lab's model folders" in str(exc.value)
    check_paths_under(found[:1], ["/models/"], host="lab")  # the model itself is inside
    with pytest.raises(EngineConfigError, match="no model folders"):
        check_paths_under(found[:1], [], host="lab")
    with pytest.raises(EngineConfigError, match="outside"):  # a sibling with the same prefix is not inside
        check_paths_under(found[:1], ["/mod"], host="lab")


@pytest.mark.parametrize(
    ("engine", "knobs", "field"),
    [
        ("llama.cpp", {"ctx_size": 10**23}, "ctx_size"),
        ("llama.cpp", {"ctx_size": "9" * 5000}, "ctx_size"),
        ("llama.cpp", {"tensor_split": "inf,1"}, "tensor_split"),
        ("llama.cpp", {"tensor_split": [float("nan"), 1]}, "tensor_split"),
        ("llama.cpp", {"tensor_split": "1e400,1"}, "tensor_split"),
        ("llama.cpp", {"n_gpu_layers": "²"}, "n_gpu_layers"),
        ("llama.cpp", {"parallel": 10**9}, "parallel"),
        ("vllm", {"max_model_len": "1e23"}, "max_model_len"),
        ("vllm", {"max_model_len": 10**23}, "max_model_len"),
        ("vllm", {"max_model_len": "999999m"}, "max_model_len"),
        ("vllm", {"tensor_parallel_size": 10**6}, "tensor_parallel_size"),
        ("vllm", {"gpu_memory_utilization": float("inf")}, "gpu_memory_utilization"),
        ("vllm", {"gpu_memory_utilization": "nan"}, "gpu_memory_utilization"),
        ("vllm", {"hf_overrides": '{"rope_scaling": {"factor": NaN}}'}, "hf_overrides"),
        ("vllm", {"hf_overrides": "[" * 5000}, "hf_overrides"),
        ("vllm", {"hf_overrides": {"a": "\x00"}}, "hf_overrides"),
        ("sglang", {"context_length": 2**40}, "context_length"),
        ("ollama", {"keep_alive": "9" * 500}, "keep_alive"),
    ],
)
def test_numbers_and_json_that_reach_an_engine_are_in_range(engine, knobs, field):
    with pytest.raises(EngineConfigError) as exc:
        get_adapter(engine).validate(EngineConfig(engine=engine, engine_version="", model=MODELS[engine], knobs=knobs))
    assert exc.value.field == field
    assert len(str(exc.value)) < 300, "the message quotes the value briefly"


def test_sglang_takes_its_api_key_from_a_private_file_never_from_the_command_line():
    spec = get_adapter("sglang").launch_spec(
        EngineConfig(engine="sglang", engine_version="0.5.23", model="Qwen/Qwen3-8B", api_key="s3cret-key")
    )
    assert not any("s3cret-key" in a for a in spec.argv), "ps would show it to every local user"
    assert "s3cret-key" not in str(spec.env)
    assert spec.argv[spec.argv.index("--config") + 1] == "@private/sglang-secrets.yaml"
    assert spec.private_files == {"sglang-secrets.yaml": 'api-key: "s3cret-key"\n'}


def test_an_old_sglang_that_only_takes_the_key_on_its_command_line_is_refused():
    with pytest.raises(EngineConfigError) as exc:
        get_adapter("sglang").validate(
            EngineConfig(engine="sglang", engine_version="0.4.6", model="Qwen/Qwen3-8B", api_key="k")
        )
    assert exc.value.field == "api_key" and "proxy" in str(exc.value)


@pytest.mark.parametrize("engine", ["vllm", "llama.cpp"])
def test_other_engines_take_the_key_from_their_environment(engine):
    spec = get_adapter(engine).launch_spec(
        EngineConfig(engine=engine, engine_version="", model=MODELS[engine], api_key="s3cret-key")
    )
    assert not any("s3cret-key" in a for a in spec.argv)
    assert "s3cret-key" in spec.env.values()


def test_sglangs_start_script_and_unit_keep_the_key_file_private_and_masked():
    config = EngineConfig(engine="sglang", engine_version="0.5.23", model="Qwen/Qwen3-8B", api_key="s3cret-key")
    adapter = get_adapter("sglang")
    script, unit = adapter.start_script(config), adapter.systemd_unit(config)
    assert "s3cret-key" not in script + unit
    assert "umask 077" in script and "cat > /etc/llm/sglang-secrets.yaml" in script
    assert "--config /etc/llm/sglang-secrets.yaml" in script
    assert "@private" not in script + unit
    assert "/etc/llm/sglang-secrets.yaml (mode 0600" in unit


def test_llamas_built_in_template_and_a_template_file_are_one_choice_and_a_name_is_one_it_knows():
    adapter = get_adapter("llama.cpp")

    def config(**knobs):
        return EngineConfig(engine="llama.cpp", engine_version="", model="/models/g.gguf", knobs=knobs)

    argv = adapter.launch_spec(config(chat_template="gemma")).argv
    assert argv[argv.index("--chat-template") + 1] == "gemma"
    # llama-server reads a built-in name only with Jinja off (on, the name is the template's text)
    assert argv.index("--no-jinja") < argv.index("--chat-template") and "--jinja" not in argv
    assert not adapter.serves_tool_calls({"chat_template": "gemma"})  # no Jinja, no tool-call parsing
    assert adapter.serves_tool_calls({"chat_template_file": "/models/g.jinja"})
    with pytest.raises(EngineConfigError) as jinja_on:
        adapter.launch_spec(config(chat_template="gemma", jinja=True))
    assert jinja_on.value.field == "jinja" and "chat_template_file" in str(jinja_on.value)
    off = adapter.launch_spec(config(chat_template="gemma", jinja=False)).argv
    assert off.count("--no-jinja") == 1
    with pytest.raises(EngineConfigError) as both:
        adapter.launch_spec(config(chat_template="gemma", chat_template_file="/models/g.jinja"))
    assert both.value.field == "chat_template" and "set one of them" in str(both.value)
    with pytest.raises(EngineConfigError) as unknown:
        adapter.launch_spec(config(chat_template="gemma4-ultra"))
    assert unknown.value.field == "chat_template" and "chatml" in str(unknown.value)


def test_a_build_from_before_jinja_was_on_by_default_gets_no_no_jinja():
    """llama-server gained `--no-jinja` when Jinja became its default (ggml-org/llama.cpp#17524); an
    older build stops at start on the unknown argument, and it reads a built-in name as a name anyway."""
    adapter = get_adapter("llama.cpp")

    def argv(version: str, **knobs):
        config = EngineConfig(engine="llama.cpp", engine_version=version, model="/models/g.gguf", knobs=knobs)
        return adapter.launch_spec(config).argv

    old = argv("b6500", chat_template="gemma")
    assert "--no-jinja" not in old and old[old.index("--chat-template") + 1] == "gemma"
    assert "--no-jinja" not in argv("b6500", jinja=False) and "--jinja" in argv("b6500", jinja=True)
    for new in ("b11434", ""):  # "" = latest
        assert argv(new, chat_template="gemma").count("--no-jinja") == 1
        assert "--no-jinja" in argv(new, jinja=False)

"""Client configs for a revision: the served name and the server's real context reach every
client, images are offered only when the server takes them, and no secret can leak."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from serving.diffing import RevisionView
from serving.exports import all_exports, base_url_for, client_exports, client_target, hermes_config, opencode_config

BASE = "http://10.0.0.5:8001/v1"
SECRET_VALUES = ("hf_realtokenvalue", "sk-realapikey", "hunter2")

QWEN38 = RevisionView(
    number=4,
    engine="vllm",
    engine_version="0.22.0",
    served_name="Qwen3.8-27B-W4A16-AWQ",
    port=8001,
    knobs={"max_model_len": 262144, "max_num_seqs": 4, "tool_call_parser": "qwen3_coder", "reasoning_parser": "qwen3"},
    env={"HF_TOKEN": SECRET_VALUES[0], "NCCL_P2P_DISABLE": "1"},
    api_key_secret="panel-key",
    hf_token_secret="hf-read",
    model={
        "name": "Qwen3.8-27B-W4A16-AWQ",
        "repo_id": "philbert440/Qwen3.8-27B-W4A16-AWQ",
        "reasoning_parser": "qwen3",
        "arch": {"native_context": 262144, "has_vision": True, "has_mtp": True},
    },
)
GEMMA = "gemma-3-270m-it-Q4_K_M"
GEMMA_GGUF = RevisionView(
    number=1,
    engine="llama.cpp",
    served_name=GEMMA,
    port=8080,
    knobs={"ctx_size": 8192, "parallel": 4},
    model={
        "name": GEMMA,
        "gguf_file": f"{GEMMA}.gguf",
        "arch": {"native_context": 32768},
    },
)


def exports(view: RevisionView, *, key: bool = True, base: str = BASE) -> dict[str, tuple[str, str, str]]:
    """The configs that could be exported (key -> (filename, content, language))."""
    return {e.key: tuple(e.export) for e in all_exports(view, base_url=base, api_key_required=key) if e.export}


def opencode(view: RevisionView, **kw) -> dict:
    filename, content, language = opencode_config(client_target(view, base_url=BASE, api_key_required=True, **kw))
    assert (filename, language) == ("opencode.json", "json")
    return json.loads(content)


@pytest.mark.parametrize(
    ("view", "served", "context"),
    [
        (QWEN38, "Qwen3.8-27B-W4A16-AWQ", 262144),  # vLLM: max_model_len
        (replace(QWEN38, knobs={"max_model_len": 65536}), "Qwen3.8-27B-W4A16-AWQ", 65536),
        (replace(QWEN38, engine="sglang", knobs={"context_length": 131072}), "Qwen3.8-27B-W4A16-AWQ", 131072),
        # llama.cpp: ctx_size 8192 over 4 slots without a unified KV -> 2048 per request
        (GEMMA_GGUF, GEMMA, 2048),
        (
            replace(GEMMA_GGUF, knobs={"ctx_size": 8192, "parallel": 4, "kv_unified": True}),
            GEMMA,
            8192,
        ),
        (
            replace(QWEN38, engine="ollama", served_name="qwen3.8:27b", knobs={"context_length": 32768}),
            "qwen3.8:27b",
            32768,
        ),
    ],
    ids=["vllm", "vllm-64k", "sglang", "llama.cpp-slots", "llama.cpp-unified", "ollama"],
)
def test_every_export_carries_the_served_name_and_real_context(view, served, context):
    out = exports(view)
    for key, (_filename, content, _language) in out.items():
        assert served in content, key
    oc = json.loads(out["opencode"][1])
    assert oc["provider"]["selfhosted"]["models"][served]["limit"]["context"] == context
    assert oc["model"] == f"selfhosted/{served}"
    hermes = yaml.safe_load(out["hermes"][1])
    assert (hermes["model"]["default"], hermes["model"]["context_length"]) == (served, context)
    metadata = json.loads(out["aider-metadata"][1])
    assert metadata[f"openai/{served}"]["max_input_tokens"] == context
    settings = yaml.safe_load(out["aider-settings"][1])
    assert settings[0]["name"] == f"openai/{served}"


def test_opencode_follows_the_custom_provider_schema():
    config = opencode(QWEN38)
    assert config["$schema"] == "https://opencode.ai/config.json"
    provider = config["provider"]["selfhosted"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"]["baseURL"] == BASE
    model = provider["models"]["Qwen3.8-27B-W4A16-AWQ"]
    assert model["name"] == "Qwen3.8-27B-W4A16-AWQ"
    assert model["limit"] == {"context": 262144, "output": 32768}
    assert model["reasoning"] is True


@pytest.mark.parametrize(
    ("view", "images"),
    [
        (QWEN38, True),
        (replace(QWEN38, knobs={**QWEN38.knobs, "language_model_only": True}), False),  # vision tower off
        (replace(QWEN38, model={**QWEN38.model, "arch": {"native_context": 262144, "has_vision": False}}), False),
        # a llama.cpp vision GGUF takes images only with its mmproj projector (seed 1)
        (replace(GEMMA_GGUF, model={**GEMMA_GGUF.model, "arch": {"has_vision": True}}), False),
        (
            replace(GEMMA_GGUF, model={**GEMMA_GGUF.model, "arch": {"has_vision": True}, "mmproj_file": "mmproj.gguf"}),
            True,
        ),
        (GEMMA_GGUF, False),  # vision unknown: do not promise images
    ],
    ids=["vision", "language-only", "text-model", "gguf-no-mmproj", "gguf-mmproj", "unknown"],
)
def test_image_input_only_when_the_server_takes_images(view, images):
    model = next(iter(opencode(view)["provider"]["selfhosted"]["models"].values()))
    if images:
        assert model["modalities"] == {"input": ["text", "image"], "output": ["text"]}
    else:
        assert "modalities" not in model
    metadata = json.loads(exports(view)["aider-metadata"][1])
    assert next(iter(metadata.values())).get("supports_vision", False) is images


def test_hermes_uses_its_self_hosted_provider_and_compresses_late():
    """`custom` is Hermes' provider for a self-hosted server: `openai-api` (the seed's hint) is
    OpenAI's own and reads OPENAI_API_KEY (test_exports_real_tools runs Hermes' resolver)."""
    filename, content, language = hermes_config(client_target(QWEN38, base_url=BASE, api_key_required=False))
    assert (filename, language) == ("config.yaml", "yaml")
    config = yaml.safe_load(content)
    assert config["model"] == {
        "provider": "custom",
        "base_url": BASE,
        "default": "Qwen3.8-27B-W4A16-AWQ",
        "api_key": "EMPTY",
        "context_length": 262144,
    }
    assert config["compression"] == {"enabled": True, "threshold": 0.75}


def test_aider_sends_the_catalog_sampling_preset_not_temperature_zero():
    view = replace(
        QWEN38,
        model={**QWEN38.model, "sampling_presets": {"thinking": {"temperature": 1.0, "top_p": 0.95, "top_k": 20}}},
    )
    settings = yaml.safe_load(exports(view)["aider-settings"][1])[0]
    assert settings["use_temperature"] == 1.0
    assert settings["extra_params"] == {"max_tokens": 32768, "top_p": 0.95, "extra_body": {"top_k": 20}}
    without = yaml.safe_load(exports(QWEN38)["aider-settings"][1])[0]
    assert without["use_temperature"] is False  # no preset: the server applies the model's own


@pytest.mark.parametrize("key_required", [True, False])
def test_no_secret_value_can_appear(key_required):
    view = replace(QWEN38, env={**QWEN38.env, "OPENAI_API_KEY": SECRET_VALUES[1]})
    out = exports(view, key=key_required, base=f"http://admin:{SECRET_VALUES[2]}@10.0.0.5:8001/v1/")
    blob = "\n".join(content for _f, content, _l in out.values())
    for value in SECRET_VALUES:
        assert value not in blob
    assert "panel-key" not in blob  # not even the secret's name is needed by a client
    assert BASE in blob  # the credentials were stripped, the address kept
    if key_required:
        assert "${LLM_API_KEY}" in out["hermes"][1]
        assert json.loads(out["opencode"][1])["provider"]["selfhosted"]["options"]["apiKey"] == "{env:LLM_API_KEY}"
        assert "Authorization: Bearer ${LLM_API_KEY}" in out["curl"][1]
    else:
        assert "apiKey" not in json.loads(out["opencode"][1])["provider"]["selfhosted"]["options"]
        assert "Authorization" not in out["curl"][1]
        assert "api_key='EMPTY'" in out["python"][1]


def test_aider_env_points_at_the_server():
    _filename, content, language = exports(QWEN38)["aider-env"]
    assert language == "bash"
    assert f"export OPENAI_API_BASE={BASE}" in content
    assert "aider --model openai/Qwen3.8-27B-W4A16-AWQ" in content


def test_curl_body_is_valid_json_with_the_served_name():
    content = exports(QWEN38)["curl"][1]
    body = content.split("-d '", 1)[1].rsplit("'", 1)[0]
    assert json.loads(body)["model"] == "Qwen3.8-27B-W4A16-AWQ"
    assert f"{BASE}/chat/completions" in content


def test_python_snippet_compiles_and_names_the_model():
    content = exports(QWEN38)["python"][1]
    compile(content, "client.py", "exec")
    assert "model='Qwen3.8-27B-W4A16-AWQ'" in content
    assert f"base_url='{BASE}'" in content


def test_a_completions_model_is_exported_with_completions_and_chat_clients_are_warned():
    """A base model served on purpose (serving.purpose): the snippets send a prompt to /completions;
    every client that chats is still exported, with a warning that it would get noise."""
    base = replace(GEMMA_GGUF, model={**GEMMA_GGUF.model, "name": "gemma-3-270m", "purpose": "completions"})
    named = {e.key: e for e in all_exports(base, base_url=BASE, api_key_required=False)}
    curl = named["curl"].export.content
    body = json.loads(curl.split("-d '", 1)[1].rsplit("'", 1)[0])
    assert f"{BASE}/completions" in curl and "/chat/completions" not in curl
    assert body["prompt"] and "messages" not in body
    python = named["python"].export.content
    compile(python, "client.py", "exec")
    assert "client.completions.create(" in python and "print(reply.choices[0].text)" in python
    assert not named["curl"].warnings and not named["python"].warnings
    chatting = [key for key, e in named.items() if e.export is not None and key not in ("curl", "python")]
    assert "opencode" in chatting and "aider-settings" in chatting
    for key in chatting:
        assert any("is a completions model (a base model" in w for w in named[key].warnings), key
    chat = {e.key: e for e in all_exports(GEMMA_GGUF, base_url=BASE, api_key_required=False)}
    assert not any("completions model" in w for e in chat.values() for w in e.warnings)


def test_unknown_context_is_refused_with_the_reason_not_guessed_or_left_out():
    """Left out, opencode never compacts and Hermes guesses: those configs are not exported."""
    view = replace(GEMMA_GGUF, knobs={})  # llama.cpp without ctx_size: -fit picks it at start
    items = {e.key: e for e in all_exports(view, base_url=BASE, api_key_required=True)}
    for key in ("opencode", "hermes", "aider-metadata"):
        assert items[key].export is None
        assert "context" in items[key].error and "unknown" in items[key].error
    assert items["aider-settings"].export is not None and items["curl"].export is not None


def test_a_measured_context_wins_over_knobs():
    view = replace(GEMMA_GGUF, served_context=4096)  # e.g. /slots n_ctx read from the running server
    assert opencode(view)["provider"]["selfhosted"]["models"][GEMMA]["limit"]["context"] == 4096


@pytest.mark.parametrize(
    ("address", "port", "url"),
    [("10.0.0.5", 8001, "http://10.0.0.5:8001/v1"), ("fd00::5", 8000, "http://[fd00::5]:8000/v1")],
)
def test_base_url_for(address, port, url):
    assert base_url_for(address, port) == url


@pytest.mark.parametrize(
    ("view", "tools"),
    [
        (QWEN38, False),  # a parser alone: vLLM still refuses tool_choice "auto"
        (replace(QWEN38, knobs={**QWEN38.knobs, "enable_auto_tool_choice": True}), True),
        (replace(QWEN38, engine="sglang"), True),  # SGLang: the parser is the switch
        (GEMMA_GGUF, True),  # llama.cpp: Jinja templates on
        (replace(GEMMA_GGUF, knobs={**GEMMA_GGUF.knobs, "jinja": False}), False),
        (replace(GEMMA_GGUF, model={**GEMMA_GGUF.model, "chat_template_tools": False}), False),  # no tool format
        (replace(GEMMA_GGUF, knobs={**GEMMA_GGUF.knobs, "chat_template": "gemma"}), False),  # built-in: Jinja off
    ],
    ids=["vllm-parser-only", "vllm-auto", "sglang", "llama.cpp", "llama.cpp-no-jinja", "no-tool-format", "built-in"],
)
def test_opencode_is_told_whether_the_server_parses_tool_calls(view, tools):
    model = next(iter(opencode(view)["provider"]["selfhosted"]["models"].values()))
    assert model["tool_call"] is tools


def _caps(view: RevisionView, **kw) -> tuple[int, int, int, int]:
    """(opencode's limit.output, aider's max_tokens, aider's max_output_tokens, the context written)."""
    target = client_target(view, base_url=BASE, api_key_required=True, **kw)
    out = {e.key: e.export for e in client_exports(target) if e.export}
    model = json.loads(out["opencode"].content)["provider"]["selfhosted"]["models"][view.served_name]
    settings = yaml.safe_load(out["aider-settings"].content)[0]
    metadata = json.loads(out["aider-metadata"].content)[f"openai/{view.served_name}"]
    assert metadata["max_tokens"] == metadata["max_output_tokens"]
    return (
        model["limit"]["output"],
        settings["extra_params"]["max_tokens"],
        metadata["max_output_tokens"],
        (model["limit"]["context"]),
    )


@pytest.mark.parametrize(
    ("knobs", "cap"),
    [
        ({"ctx_size": 8192, "parallel": 4}, 512),  # 2,048 per slot: a quarter of the slot, never 8,192
        ({"ctx_size": 1024, "parallel": 1}, 256),
        ({"ctx_size": 65536, "parallel": 1}, 8192),  # the 270M model is trained for 32,768: its quarter, not 16,384
        ({"ctx_size": 32768, "parallel": 1}, 8192),
    ],
    ids=["slots", "small-context", "past-trained", "trained"],
)
def test_opencode_and_aider_output_caps_fit_what_one_request_of_the_model_holds(knobs, cap):
    view = replace(GEMMA_GGUF, knobs=knobs)
    opencode_cap, aider_cap, aider_meta_cap, _context = _caps(view)
    assert opencode_cap == aider_cap == aider_meta_cap == cap


def test_an_output_cap_is_never_more_than_one_request_holds():
    """Whatever the context, and whatever a caller asks: the reply budget leaves the prompt room
    and never exceeds the slot."""
    for ctx in (256, 512, 3000, 32768, 262144, 1048576):
        view = replace(
            QWEN38, knobs={"max_model_len": ctx}, model={**QWEN38.model, "arch": {"native_context": 1 << 21}}
        )
        output, _, _, context = _caps(view)
        assert 1 <= output <= min(context // 4, 32768), ctx
    small = replace(GEMMA_GGUF, knobs={"ctx_size": 4096, "parallel": 1})
    output, aider_cap, _, context = _caps(small, max_output=100_000)
    assert output == aider_cap == context == 4096

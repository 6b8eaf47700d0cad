"""Claude Code's settings and Codex's config.toml for a revision (issue 40): the server on the API
each agent speaks, the model for every role the agent has, the served context it compacts by, its
own traffic to its maker off, and the key only ever read from the user's environment. The real
agents run these files against a real engine in tests/hostagent/frontdoor/test_coding_agents.py."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace

import pytest

from serving.engines.base import OPENAI_CORE
from serving.engines.registry import get_adapter
from serving.exports import (
    NotExportable,
    claude_code_settings,
    client_exports,
    client_target,
    codex_config,
    through_door,
    through_router,
)

from .test_exports import GEMMA_GGUF, QWEN38

BASE = "http://10.0.0.5:8001/v1"
DOOR = "http://10.0.0.5:4000/v1"


def door_target(key: bool = True):
    direct = client_target(QWEN38, base_url=BASE, api_key_required=True)
    return through_door(direct, base_url=DOOR, model="coder", api_key_required=key, route="door")


def claude(target) -> dict:
    made = claude_code_settings(target)
    assert (made.filename, made.language) == ("settings.json", "json")
    return json.loads(made.content)


def codex(target) -> dict:
    made = codex_config(target)
    assert (made.filename, made.language) == ("config.toml", "toml")
    return tomllib.loads(made.content)


def test_claude_code_names_the_door_without_v1_the_alias_in_every_role_and_reads_the_key_from_the_environment():
    settings = claude(door_target())
    env = settings["env"]
    assert env["ANTHROPIC_BASE_URL"] == "http://10.0.0.5:4000"  # Claude Code appends /v1/messages itself
    roles = ("ANTHROPIC_MODEL", "ANTHROPIC_DEFAULT_OPUS_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL")
    assert {env[r] for r in (*roles, "ANTHROPIC_DEFAULT_HAIKU_MODEL")} == {"coder"} and settings["model"] == "coder"
    assert env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "262144"  # vLLM: max_model_len
    assert env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "32768"
    for switch in ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_TELEMETRY", "DISABLE_AUTOUPDATER"):
        assert env[switch] == "1"
    assert settings["apiKeyHelper"] == "printenv CONTROLPANEL_KEY"
    assert "ANTHROPIC_API_KEY" not in env and "ANTHROPIC_AUTH_TOKEN" not in env
    assert claude(door_target(key=False))["apiKeyHelper"] == "echo EMPTY"  # an open door


def test_codex_gets_a_responses_provider_at_the_door_with_the_key_from_the_environment():
    config = codex(door_target())
    assert config["model"] == "coder" and config["model_provider"] == "controlpanel"
    assert config["model_context_window"] == 262144 and config["check_for_update_on_startup"] is False
    assert config["model_providers"]["controlpanel"] == {
        "name": "coder (vLLM)",
        "base_url": DOOR,
        "wire_api": "responses",
        "env_key": "CONTROLPANEL_KEY",
    }
    assert config["analytics"] == {"enabled": False} and config["feedback"] == {"enabled": False}
    assert config["features"] == {"plugins": False}
    assert "env_key" not in codex(door_target(key=False))["model_providers"]["controlpanel"]  # sends none


def test_through_the_router_or_at_the_engine_they_name_that_url_and_its_key():
    router = through_router(door_target(), base_url="https://llm.lab.example/v1", route="router", unreachable="")
    assert claude(router)["env"]["ANTHROPIC_BASE_URL"] == "https://llm.lab.example"
    assert codex(router)["model_providers"]["controlpanel"]["base_url"] == "https://llm.lab.example/v1"
    engine = client_target(GEMMA_GGUF, base_url="http://10.0.0.5:8080/v1", api_key_required=True)
    assert claude(engine)["apiKeyHelper"] == "printenv LLM_API_KEY"
    assert claude(engine)["env"]["ANTHROPIC_MODEL"] == "gemma-3-270m-it-Q4_K_M"
    assert codex(engine)["model_providers"]["controlpanel"]["env_key"] == "LLM_API_KEY"


def test_an_unknown_context_or_an_engine_without_the_agents_api_is_refused_saying_why(monkeypatch):
    unknown = client_target(replace(GEMMA_GGUF, knobs={}), base_url=BASE, api_key_required=False)
    items = {e.key: e for e in client_exports(unknown)}
    for key in ("claude-code", "codex"):
        assert items[key].export is None and "context" in items[key].error
    # An engine whose server lacks the path: every request of that agent would be refused.
    monkeypatch.setattr(get_adapter("vllm"), "api_paths", OPENAI_CORE)
    with pytest.raises(NotExportable, match=r"Claude Code calls /v1/messages, which vLLM does not serve"):
        claude_code_settings(door_target())
    with pytest.raises(NotExportable, match=r"Codex calls /v1/responses, which vLLM does not serve"):
        codex_config(door_target())

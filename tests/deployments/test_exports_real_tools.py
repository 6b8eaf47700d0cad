"""Each client export handed to the real client, as a user would (issue 14).

- Hermes Agent (hermes-agent on PyPI): its own `load_config()` reads our config.yaml and its
  `resolve_runtime_provider()` resolves the provider, URL and key. A real OPENAI_API_KEY in the
  environment must never be the key sent to the lab host.
- opencode (opencode-ai on npm, the real binary): `opencode debug config` validates our
  opencode.json against its schema and prints what it loaded; `opencode models` lists ours.
- aider (aider-chat on PyPI): its own loaders (`register_models`, `register_litellm_models`)
  read our two files, and `Model()` shows the temperature, parameters and window it will use.

The tools live in their own venvs/folders under .tools/ (./scripts/install-tools); each test
skips, saying so, where its tool could not be installed. Nothing here needs the network.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from serving.diffing import RevisionView
from serving.exports import (
    HERMES_MIN_CONTEXT,
    NotExportable,
    aider_model_metadata,
    aider_model_settings,
    client_target,
    client_warnings,
    hermes_config,
    opencode_config,
    through_door,
    through_router,
)
from tests.support.client_tools import isolated_env, opencode_bin, tool_python

BASE = "http://10.0.0.5:8001/v1"
DOOR = "http://10.0.0.5:4000/v1"  # the host's front door (issue 27): configs name it and an alias
ROUTER = "http://10.0.0.1:4100/v1"  # the lab router (issue 27, one URL for the lab): the same alias
SERVED = "Qwen3.8-27B-W4A16-AWQ"
QWEN38 = RevisionView(
    number=4,
    engine="vllm",
    engine_version="0.22.0",
    served_name=SERVED,
    port=8001,
    knobs={"max_model_len": 262144, "max_num_seqs": 4, "reasoning_parser": "qwen3"},
    model={
        "name": SERVED,
        "repo_id": "philbert440/Qwen3.8-27B-W4A16-AWQ",
        "reasoning_parser": "qwen3",
        "arch": {"native_context": 262144, "has_vision": True},
        "sampling_presets": {
            "thinking": {"temperature": 1.0, "top_p": 0.95, "top_k": 20},
            "non_thinking": {"temperature": 0.7, "top_p": 0.8, "presence_penalty": 1.5},
        },
    },
)
NO_PRESET = replace(QWEN38, knobs={"max_model_len": 32768}, model={**QWEN38.model, "sampling_presets": {}})


def _run_python(python: Path, code: str, env: dict[str, str], cwd: Path) -> dict:
    done = subprocess.run(  # noqa: S603 - a fixed tool and our own probe code
        [str(python), "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- Hermes Agent ----------------------------------------------------------------------------

HERMES_PROBE = """
import json
from hermes_cli.env_loader import load_hermes_dotenv
load_hermes_dotenv()  # as the hermes command does first: ~/.hermes/.env into the environment
from hermes_cli.config import load_config
from hermes_cli.runtime_provider import resolve_runtime_provider
model = load_config()["model"]
runtime = resolve_runtime_provider()
print(json.dumps({"model": model, "runtime": {k: runtime.get(k) for k in ("provider", "base_url", "api_key")}}))
"""


@pytest.mark.parametrize("key_required", [True, False], ids=["api-key", "no-key"])
def test_hermes_resolves_our_config_to_the_lab_host_never_to_openai(tmp_path, key_required):
    python = tool_python("hermes-agent")
    target = client_target(QWEN38, base_url=BASE, api_key_required=key_required)
    hermes_home = tmp_path / "hermes"
    hermes_home.mkdir()
    (hermes_home / "config.yaml").write_text(hermes_config(target).content)
    # A user who also uses OpenAI has a real key in the environment: it must not reach the lab.
    env = isolated_env(tmp_path, HERMES_HOME=str(hermes_home), OPENAI_API_KEY="sk-real-openai-key")
    if key_required:  # kept where the config's comment says: ~/.hermes/.env
        (hermes_home / ".env").write_text("LLM_API_KEY=sk-lab-key\n")
    seen = _run_python(python, HERMES_PROBE, env, tmp_path)
    assert seen["runtime"] == {
        "provider": "custom",
        "base_url": BASE,
        "api_key": "sk-lab-key" if key_required else "EMPTY",
    }
    assert seen["model"]["default"] == SERVED
    assert seen["model"]["context_length"] == 262144


HERMES_START = """
import json
from hermes_cli.config import load_config
from hermes_cli.runtime_provider import resolve_runtime_provider
from run_agent import AIAgent
model, runtime = load_config()["model"], resolve_runtime_provider()
try:
    AIAgent(model=model["default"], base_url=runtime["base_url"], api_key=runtime["api_key"],
            provider=runtime["provider"], quiet_mode=True, skip_context_files=True, skip_memory=True)
    print(json.dumps({"refused": ""}))
except ValueError as exc:
    print(json.dumps({"refused": str(exc)}))
"""


@pytest.mark.parametrize(("context", "refused"), [(32768, True), (64000, False)])
def test_hermes_warning_says_exactly_when_the_real_agent_refuses_to_start(tmp_path, context, refused):
    """Hermes Agent 0.19.0 refuses a model under 64,000 tokens when its agent starts (no request
    is sent): the export warns, in the page's list and in the file, exactly then."""
    python = tool_python("hermes-agent")
    view = replace(QWEN38, knobs={"max_model_len": context})
    target = client_target(view, base_url=BASE, api_key_required=False)
    made = hermes_config(target)
    hermes_home = tmp_path / "hermes"
    hermes_home.mkdir()
    (hermes_home / "config.yaml").write_text(made.content)
    seen = _run_python(python, HERMES_START, isolated_env(tmp_path, HERMES_HOME=str(hermes_home)), tmp_path)
    warned = client_warnings("hermes", target)
    assert bool(seen["refused"]) is refused and bool(warned) is refused, seen
    if refused:
        assert f"minimum {HERMES_MIN_CONTEXT:,} required by Hermes Agent" in seen["refused"]
        assert f"under {HERMES_MIN_CONTEXT:,} tokens" in warned[0] and f"{context:,}" in warned[0]
        assert made.content.startswith(f"# WARNING: {warned[0]}")
    assert client_warnings("opencode", target) == ()


def test_hermes_is_not_exported_when_the_context_is_unknown():
    unknown = replace(QWEN38, knobs={}, model={**QWEN38.model, "arch": {}})
    with pytest.raises(NotExportable, match="context"):
        hermes_config(client_target(unknown, base_url=BASE, api_key_required=False))


# --- opencode ----------------------------------------------------------------------------------


def _opencode(tmp_path: Path, *args: str, key: bool = True) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    target = client_target(QWEN38, base_url=BASE, api_key_required=key)
    (project / "opencode.json").write_text(opencode_config(target).content)
    env = isolated_env(tmp_path, OPENCODE_DISABLE_AUTOUPDATE="1", OPENCODE_DISABLE_MODELS_FETCH="1", LLM_API_KEY="x")
    return subprocess.run(  # noqa: S603 - the real opencode binary
        [str(opencode_bin()), *args], cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_opencode_loads_our_config_with_its_limits(tmp_path):
    done = _opencode(tmp_path, "debug", "config")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "invalid" not in (done.stdout + done.stderr).lower()
    config = json.loads(done.stdout)
    assert config["model"] == f"selfhosted/{SERVED}"
    provider = config["provider"]["selfhosted"]
    assert provider["options"]["baseURL"] == BASE
    model = provider["models"][SERVED]
    assert model["limit"] == {"context": 262144, "output": 32768}  # opencode compacts by these
    assert model["modalities"] == {"input": ["text", "image"], "output": ["text"]}
    # What the model can do is stated, never opencode's guess: this server parses no tool calls.
    assert (model["tool_call"], model["reasoning"], model["attachment"]) == (False, True, True)


def test_opencode_lists_the_served_model(tmp_path):
    done = _opencode(tmp_path, "models", "selfhosted", key=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"selfhosted/{SERVED}" in done.stdout.split()


# --- aider -------------------------------------------------------------------------------------

AIDER_PROBE = """
import json, sys
from aider import models
models.register_models([".aider.model.settings.yml"])
models.register_litellm_models([".aider.model.metadata.json"])
model = models.Model(sys.argv[1] if len(sys.argv) > 1 else "openai/%s")
print(json.dumps({
    "use_temperature": model.use_temperature,
    "extra_params": model.extra_params,
    "edit_format": model.edit_format,
    "max_input_tokens": model.info.get("max_input_tokens"),
    "max_output_tokens": model.info.get("max_output_tokens"),
}))
"""


@pytest.mark.parametrize(
    ("view", "temperature", "params"),
    [
        # the catalog's thinking preset: the server runs a reasoning parser
        (QWEN38, 1.0, {"max_tokens": 32768, "top_p": 0.95, "extra_body": {"top_k": 20}}),
        # no preset: send no temperature (aider's default would send 0); the server uses the model's
        (NO_PRESET, False, {"max_tokens": 8192}),
    ],
    ids=["preset", "no-preset"],
)
def test_aider_loads_our_settings_and_window(tmp_path, view, temperature, params):
    python = tool_python("aider-chat")
    target = client_target(view, base_url=BASE, api_key_required=False)
    (tmp_path / ".aider.model.settings.yml").write_text(aider_model_settings(target).content)
    (tmp_path / ".aider.model.metadata.json").write_text(aider_model_metadata(target).content)
    env = isolated_env(tmp_path, OPENAI_API_BASE=BASE, OPENAI_API_KEY="EMPTY", LITELLM_LOCAL_MODEL_COST_MAP="True")
    seen = _run_python(python, AIDER_PROBE % SERVED, env, tmp_path)
    assert seen["use_temperature"] == temperature
    assert seen["extra_params"] == params
    assert seen["edit_format"] == "diff"
    assert seen["max_input_tokens"] == target.context_tokens
    assert seen["max_output_tokens"] == params["max_tokens"]


# --- through the front door (issue 27) -----------------------------------------------------------


def _door_target(key_required: bool = True):
    direct = client_target(QWEN38, base_url=BASE, api_key_required=True)
    return through_door(direct, base_url=DOOR, model="coder", api_key_required=key_required, route="door")


def _router_target():
    return through_router(_door_target(), base_url=ROUTER, route="router", unreachable="")


@pytest.mark.parametrize(("make", "url"), [(_door_target, DOOR), (_router_target, ROUTER)], ids=["door", "router"])
def test_each_tool_loads_the_front_door_and_the_alias_with_the_users_key(tmp_path, make, url):
    """Hermes resolves the door (or the lab router), `coder` and the user's CONTROLPANEL_KEY (not
    the engine's LLM_API_KEY); opencode loads that URL and `selfhosted/coder`; aider finds
    `openai/coder`."""
    target = make()
    hermes_home = tmp_path / "hermes"
    hermes_home.mkdir()
    (hermes_home / "config.yaml").write_text(hermes_config(target).content)
    (hermes_home / ".env").write_text("CONTROLPANEL_KEY=cpk_user\nLLM_API_KEY=sk-engine\n")
    env = isolated_env(tmp_path, HERMES_HOME=str(hermes_home), OPENAI_API_KEY="sk-real-openai-key")
    seen = _run_python(tool_python("hermes-agent"), HERMES_PROBE, env, tmp_path)
    assert seen["runtime"] == {"provider": "custom", "base_url": url, "api_key": "cpk_user"}
    assert seen["model"]["default"] == "coder"

    project = tmp_path / "project"
    project.mkdir()
    (project / "opencode.json").write_text(opencode_config(target).content)
    env = isolated_env(tmp_path, OPENCODE_DISABLE_AUTOUPDATE="1", OPENCODE_DISABLE_MODELS_FETCH="1")
    done = subprocess.run(  # noqa: S603 - the real opencode binary
        [str(opencode_bin()), "debug", "config"],
        cwd=project,
        env={**env, "CONTROLPANEL_KEY": "cpk_user"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    config = json.loads(done.stdout)
    assert config["model"] == "selfhosted/coder"
    assert config["provider"]["selfhosted"]["options"] == {"baseURL": url, "apiKey": "***"}  # opencode masks it

    (tmp_path / ".aider.model.settings.yml").write_text(aider_model_settings(target).content)
    (tmp_path / ".aider.model.metadata.json").write_text(aider_model_metadata(target).content)
    env = isolated_env(tmp_path, OPENAI_API_BASE=url, OPENAI_API_KEY="cpk_user", LITELLM_LOCAL_MODEL_COST_MAP="True")
    seen = _run_python(tool_python("aider-chat"), AIDER_PROBE % "coder", env, tmp_path)
    assert seen["max_input_tokens"] == target.context_tokens and seen["use_temperature"] == 1.0

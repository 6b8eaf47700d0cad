"""Client configs for a revision: opencode, Hermes Agent, Aider, Claude Code, Codex, curl and the
openai client.

Pure: a RevisionView, the server's base URL and whether it wants an API key go in; each
export comes out as (filename, content, language) for a download or copy button, or
raises `NotExportable` saying why that client cannot be told the truth (e.g. the served
context is unknown: opencode would then never compact, Hermes would guess).

Each config writes what the client would otherwise take from its own defaults:
- Hermes Agent: `provider: custom` (its self-hosted provider; `openai-api` is OpenAI's own,
  reads OPENAI_API_KEY and would send a real OpenAI key to the lab host), `base_url`,
  `default` (the model; `api_base`/`name` are old aliases newer releases ignore),
  `api_key` and `context_length`. Checked with hermes-agent's own `load_config()` and
  `resolve_runtime_provider()` (tests/deployments/test_exports_real_tools.py).
- opencode: `limit.context` and `limit.output` always (opencode compacts by them); the output cap
  (opencode's and aider's) is a quarter of what one request holds: the per-slot context, never past the
  model's trained context, at most 32K (`default_max_output`), and never more than the slot.
- Aider: `use_temperature` and the catalog's sampling preset (aider otherwise sends
  temperature 0), `extra_params` with the reply budget; vLLM-only parameters (top_k) go in
  `extra_body`, which the OpenAI client passes through.
- Claude Code (Anthropic's Messages API) and Codex (OpenAI's Responses API): the model for every
  role the agent has, the window it compacts by, and the agent's own traffic to its maker off
  (telemetry, update checks); checked by running each real agent against a real llama-server
  through the front door (tests/hostagent/frontdoor/test_coding_agents.py).

No secret can appear: a view only names secrets, and the key is always a placeholder
(`{env:LLM_API_KEY}` for opencode's own substitution, `${LLM_API_KEY}` elsewhere, Claude Code's
`printenv LLM_API_KEY`, Codex's `env_key`) or `EMPTY` when the server takes none. Through the
host's front door (`through_door`) the configs name the door and the revision's alias, and the key
is the user's inference key (`CONTROLPANEL_KEY`); the engine's own key stays behind the door.
Through the lab router (`through_router`) they name the router instead, with the same alias and
key. The context written into each config is the one the server really runs with
(serving.diffing.context): for llama.cpp that is the per-slot context, ctx_size / parallel,
because one request can never use more than its slot.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from serving.diffing.context import ServedContext, revision_context, vision_state
from serving.diffing.view import RevisionView, engine_label
from serving.engines.base import EngineConfigError
from serving.engines.registry import get_adapter
from serving.purpose import COMPLETIONS

API_KEY_ENV = "LLM_API_KEY"
DOOR_KEY_ENV = "CONTROLPANEL_KEY"  # the user's inference key for the front door (docs/front-door.md)
NO_KEY = "EMPTY"  # what OpenAI clients send when the server takes no key (seed 2, §4 i)
OPENCODE_SCHEMA = "https://opencode.ai/config.json"
HERMES_COMPRESSION_THRESHOLD = 0.75  # seed 2 §4 c: use the window before the lossy summary pass
MAX_OUTPUT_CAP = 32768
# hermes-agent 0.19.0 (agent.model_metadata.MINIMUM_CONTEXT_LENGTH): below it the agent refuses to
# start ("below the minimum 64,000 required by Hermes Agent"); its tool schemas and system prompt
# are a large fixed prefix.
HERMES_MIN_CONTEXT = 64_000


class NotExportable(ValueError):
    """This revision cannot be exported to that target as it runs (the message says why)."""


class Export(NamedTuple):
    filename: str
    content: str
    language: str  # "json" | "yaml" | "bash" | "python": the code block's highlighting


@dataclass(frozen=True)
class NamedExport:
    key: str
    title: str
    export: Export | None
    error: str = ""  # why there is no export (NotExportable)
    warnings: tuple[str, ...] = ()  # why the tool itself would still refuse the file (`client_warnings`)


@dataclass(frozen=True)
class ClientTarget:
    """What every client config needs to know about the server."""

    served_name: str
    base_url: str
    context: ServedContext
    vision: bool
    api_key_required: bool
    reasoning: bool
    engine: str
    max_output: int | None
    tools: bool = False  # the server turns the model's tool calls into tool_calls
    sampling: dict[str, float] = field(default_factory=dict)  # the catalog's preset for this use
    sampling_preset: str = ""  # its name ("thinking", "non_thinking", ...)
    unreachable: str = ""  # why a client on another machine cannot reach base_url ("" = it can)
    key_env: str = API_KEY_ENV  # the environment variable the configs read the key from
    route: str = ""  # what base_url is (the router, the front door and alias, or the engine and why), for the page
    via_router: bool = False  # base_url is the lab router's (`through_router`)
    completions: bool = False  # a completions model (base, serving.purpose): it continues text, chats get noise

    @property
    def context_tokens(self) -> int | None:
        return self.context.per_sequence

    @property
    def via_door(self) -> bool:
        """The configs go through the host's front door (`through_door`), or through the lab
        router to the doors (`through_router`): the user's inference key, the door's name."""
        return self.key_env == DOOR_KEY_ENV

    @property
    def key_placeholder(self) -> str:
        return f"${{{self.key_env}}}" if self.api_key_required else NO_KEY

    def require_context(self, client: str) -> int:
        """The per-request context, or NotExportable: a client told nothing falls back to its
        own default (opencode never compacts, Hermes guesses, aider assumes a small window)."""
        if self.context_tokens is None:
            raise NotExportable(
                f"{client} needs the context the server runs with, and it is unknown ({self.context.source}): "
                "set it on the revision (max_model_len, ctx_size, context_length)"
            )
        return self.context_tokens

    def require_reachable(self, client: str) -> str:
        """The base URL, or NotExportable when clients on other machines cannot reach it (a host
        on another machine whose address is loopback: a laptop would connect to itself)."""
        if self.unreachable:
            raise NotExportable(f"{client} runs on another machine and {self.unreachable}")
        return self.base_url

    @property
    def context_note(self) -> str:
        if self.context_tokens is None:
            return f"The server's context is unknown ({self.context.source}); set it in the revision to fill it in."
        return f"{self.context_tokens:,} tokens ({self.context.source})"


def base_url_for(address: str, port: int, *, scheme: str = "http") -> str:
    """ "http://10.0.0.5:8001/v1"; IPv6 addresses get brackets."""
    host = address.strip()
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}/v1"


def _clean_url(url: str) -> str:
    """Drop any user:password@ from the URL, so a credential can never ride along."""
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


OUTPUT_SHARE = 4  # a reply may take a quarter of what one request holds; the prompt keeps the rest


def request_room(context: int | None, *, trained: int | None = None) -> int | None:
    """What one request can really hold: the served context per request (per slot), and never more
    than the model's trained context (llama-server caps each slot there, and past it the model was
    never trained to write). None when the context is unknown."""
    if not context:
        return None
    return min(context, trained) if trained and trained > 0 else context


def default_max_output(context: int | None, *, trained: int | None = None) -> int | None:
    """A reply budget that fits the model and leaves room for the prompt: a quarter of what one
    request holds (`request_room`), at most 32K."""
    room = request_room(context, trained=trained)
    return max(1, min(MAX_OUTPUT_CAP, room // OUTPUT_SHARE)) if room else None


def fitted_max_output(asked: int | None, context: int | None, *, trained: int | None = None) -> int | None:
    """The output cap the configs write: `asked` when given, else `default_max_output`; never more
    than one request holds, so a client never asks for a reply the slot cannot take."""
    room = request_room(context, trained=trained)
    if not asked:
        return default_max_output(context, trained=trained)
    return min(asked, room) if room else asked


SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "repetition_penalty")


def sampling_preset(model: Any, *, reasoning: bool) -> tuple[str, dict[str, float]]:
    """The catalog's sampling preset for how the server runs the model: "thinking" when it
    reasons, else "non_thinking"; a model with one preset uses it. ("", {}) when none."""
    presets = model.get("sampling_presets") if hasattr(model, "get") else None
    if not isinstance(presets, dict) or not presets:
        return "", {}
    wanted = ("thinking", "default") if reasoning else ("non_thinking", "default")
    name = next((n for n in wanted if isinstance(presets.get(n), dict)), "")
    if not name and len(presets) == 1:
        name = next(iter(presets))
    chosen = presets.get(name) if name else None
    if not isinstance(chosen, dict):
        return "", {}
    values = {
        key: float(value)
        for key, value in chosen.items()
        if key in SAMPLING_KEYS and isinstance(value, int | float) and not isinstance(value, bool)
    }
    return (name, values) if values else ("", {})


def serves_tool_calls(view: RevisionView) -> bool:
    """Whether the server parses the model's tool calls into `tool_calls` (else a client's tool
    request fails, or the call arrives as text): vLLM with enable_auto_tool_choice, SGLang with a
    tool_call_parser, llama.cpp unless its Jinja templates are off, Ollama always."""
    try:
        return get_adapter(view.engine).serves_tool_calls(view.knobs)
    except EngineConfigError:
        return False


def calls_tools(view: RevisionView) -> bool:
    """Whether clients are told the model calls tools: the server parses them (`serves_tool_calls`)
    and the model is not known to lack a tool format. A GGUF whose own chat template has no tools
    (or that has no template: Gemma 3 270M) was not trained to call them; llama.cpp's generic
    fallback would still offer them and an agent would wait on calls that never come. A template
    file the revision names instead is not read here, so it is given the benefit."""
    if view.model.get("chat_template_tools") is False and not view.knobs.get("chat_template_file"):
        return False
    return serves_tool_calls(view)


def client_target(
    view: RevisionView,
    *,
    base_url: str,
    api_key_required: bool,
    max_output: int | None = None,
    unreachable: str = "",
) -> ClientTarget:
    ctx = revision_context(view)
    vision, _why = vision_state(view)
    reasoning = bool(view.knobs.get("reasoning_parser") or view.model.get("reasoning_parser"))
    preset, sampling = sampling_preset(view.model, reasoning=reasoning)
    return ClientTarget(
        served_name=view.served_name or view.model_name,
        base_url=_clean_url(base_url),
        context=ctx,
        vision=bool(vision),
        api_key_required=api_key_required,
        reasoning=reasoning,
        engine=view.engine,
        max_output=fitted_max_output(max_output, ctx.per_sequence, trained=view.arch.native_context),
        tools=calls_tools(view),
        completions=view.model.get("purpose") == COMPLETIONS,
        sampling=sampling,
        sampling_preset=preset,
        unreachable=unreachable,
    )


def through_door(
    target: ClientTarget, *, base_url: str, model: str, api_key_required: bool, route: str
) -> ClientTarget:
    """`target` reached through the host's front door: its URL, the name the door answers for the
    revision (an alias when it has one, so the config survives a switch), and the user's
    inference key (`${CONTROLPANEL_KEY}`), never the engine's own key."""
    return replace(
        target,
        served_name=model,
        base_url=_clean_url(base_url),
        api_key_required=api_key_required,
        key_env=DOOR_KEY_ENV,
        route=route,
    )


def through_router(door: ClientTarget, *, base_url: str, route: str, unreachable: str) -> ClientTarget:
    """`door` (a `through_door` target) reached through the lab router instead: one URL for the
    lab, the same name, whichever host's door serves it; the key is the same inference key (the
    doors' own table). `unreachable` is about the router's URL now, not the host's."""
    if not door.via_door:
        raise ValueError("the lab router reaches a revision only through its host's front door")
    return replace(door, base_url=_clean_url(base_url), route=route, unreachable=unreachable, via_router=True)


def _yaml_str(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid double-quoted YAML scalar


# -- opencode ---------------------------------------------------------------------------


def opencode_config(target: ClientTarget, *, provider_id: str = "selfhosted", provider_name: str = "") -> Export:
    """opencode.json: a custom provider on @ai-sdk/openai-compatible (opencode.ai/config.json).

    Without `modalities` opencode treats a custom model as text-only and refuses images,
    so it is set exactly when the server takes images (seed 1). `limit` is always written:
    without it opencode never compacts a conversation (NotExportable when the context is
    unknown). What the model can do is written either way, never left to opencode's
    defaults: attachments, reasoning, temperature, and tool calls only where the server
    parses them."""
    context = target.require_context("opencode")
    target.require_reachable("opencode")
    model: dict[str, object] = {
        "name": target.served_name,
        "limit": {"context": context, "output": target.max_output or default_max_output(context)},
        "attachment": target.vision,
        "reasoning": target.reasoning,
        "temperature": True,
        "tool_call": target.tools,
    }
    if target.vision:
        model["modalities"] = {"input": ["text", "image"], "output": ["text"]}
    options: dict[str, str] = {"baseURL": target.base_url}
    if target.api_key_required:
        options["apiKey"] = f"{{env:{target.key_env}}}"
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": provider_name or f"{target.served_name} ({engine_label(target.engine)})",
        "options": options,
        "models": {target.served_name: model},
    }
    config = {
        "$schema": OPENCODE_SCHEMA,
        "provider": {provider_id: provider},
        "model": f"{provider_id}/{target.served_name}",
    }
    return Export("opencode.json", json.dumps(config, indent=2) + "\n", "json")


# -- Hermes Agent -------------------------------------------------------------------------


def hermes_warnings(target: ClientTarget) -> tuple[str, ...]:
    """Why Hermes Agent would refuse to start with this revision ((), when it would not)."""
    context = target.context_tokens
    if context is None or context >= HERMES_MIN_CONTEXT:
        return ()
    return (
        f"Hermes Agent refuses any model with a context under {HERMES_MIN_CONTEXT:,} tokens (hermes-agent 0.19.0: "
        f"its tool schemas and system prompt are a large fixed prefix), and this revision serves {context:,} "
        "per request: Hermes will not start with it; serve a larger context (max_model_len, ctx_size) to use Hermes",
    )


def hermes_config(target: ClientTarget) -> Export:
    """~/.hermes/config.yaml: Hermes' self-hosted provider (`custom`) at the server, the served
    model as `default`, the key as `${LLM_API_KEY}` (Hermes expands it from its .env) or
    EMPTY, model.context_length = the server's real context, and compression at 0.75 of it.

    Never `openai-api`: that is Hermes' OpenAI provider, which ignores model.api_key and
    reads OPENAI_API_KEY, so a real OpenAI key would reach the lab host."""
    context = target.require_context("Hermes Agent")
    target.require_reachable("Hermes Agent")
    key_comment = "  # Hermes expands it from the environment or ~/.hermes/.env" if target.api_key_required else ""
    lines = [f"# WARNING: {warning}" for warning in hermes_warnings(target)]
    lines += [
        f"# Hermes Agent: {target.served_name} at {target.base_url}",
        "# context_length must match the server, or Hermes compresses conversations too early (or too late).",
        f"# Context: {target.context_note}",
        "model:",
        "  provider: custom",
        f"  base_url: {_yaml_str(target.base_url)}",
        f"  default: {_yaml_str(target.served_name)}",
        f"  api_key: {_yaml_str(target.key_placeholder)}" + key_comment,
        f"  context_length: {context}",
        "compression:",
        "  enabled: true",
        f"  threshold: {HERMES_COMPRESSION_THRESHOLD}",
    ]
    return Export("config.yaml", "\n".join(lines) + "\n", "yaml")


# -- Aider -------------------------------------------------------------------------------


def aider_name(target: ClientTarget) -> str:
    return f"openai/{target.served_name}"  # aider routes OpenAI-compatible servers by this prefix


def aider_model_settings(target: ClientTarget) -> Export:
    """.aider.model.settings.yml: aider's ModelSettings for the served model. `use_temperature`
    is always written (aider's default sends temperature 0): the catalog preset's temperature,
    or false (send none: the server applies the model's generation config) without a preset.
    The preset's other values go in extra_params; top_k and other vLLM/SGLang/llama.cpp-only
    values in extra_params.extra_body, which the OpenAI client sends as they are."""
    target.require_reachable("aider")
    lines = [
        f"# .aider.model.settings.yml for {target.served_name} at {target.base_url}",
        f"# Sampling: the catalog's {target.sampling_preset!r} preset"
        if target.sampling_preset
        else "# Sampling: the catalog has no preset; the server applies the model's generation config",
        f"- name: {_yaml_str(aider_name(target))}",
        "  edit_format: diff",
        "  use_repo_map: true",
    ]
    temperature = target.sampling.get("temperature")
    lines.append(f"  use_temperature: {temperature if temperature is not None else 'false'}")
    standard = {k: v for k, v in target.sampling.items() if k in ("top_p", "presence_penalty")}
    extra_body = {k: v for k, v in target.sampling.items() if k not in ("temperature", "top_p", "presence_penalty")}
    params: dict[str, Any] = {}
    if target.max_output:
        params["max_tokens"] = target.max_output
    params.update(standard)
    if extra_body:
        params["extra_body"] = {k: int(v) if k == "top_k" else v for k, v in extra_body.items()}
    if params:
        lines.append("  extra_params:")
        for key, value in params.items():
            if isinstance(value, dict):
                lines.append(f"    {key}:")
                lines += [f"      {k}: {v}" for k, v in value.items()]
            else:
                lines.append(f"    {key}: {value}")
    return Export(".aider.model.settings.yml", "\n".join(lines) + "\n", "yaml")


def aider_model_metadata(target: ClientTarget) -> Export:
    """.aider.model.metadata.json (litellm's model info): the window aider budgets by."""
    context = target.require_context("aider")
    output = target.max_output or default_max_output(context)
    entry: dict[str, object] = {
        "litellm_provider": "openai",
        "mode": "chat",
        "input_cost_per_token": 0,
        "output_cost_per_token": 0,
        "max_input_tokens": context,
        "max_tokens": output,
        "max_output_tokens": output,
    }
    if target.vision:
        entry["supports_vision"] = True
    content = json.dumps({aider_name(target): entry}, indent=2) + "\n"
    return Export(".aider.model.metadata.json", content, "json")


def aider_env(target: ClientTarget) -> Export:
    target.require_reachable("aider")
    key = f'"${{{target.key_env}}}"' if target.api_key_required else NO_KEY
    lines = [
        "# Point aider at the server (or put openai-api-base / model in .aider.conf.yml).",
        f"export OPENAI_API_BASE={shlex.quote(target.base_url)}",
        f"export OPENAI_API_KEY={key}",
        f"aider --model {shlex.quote(aider_name(target))}",
    ]
    return Export("aider.sh", "\n".join(lines) + "\n", "bash")


# -- coding agents on other APIs: Claude Code (Anthropic Messages), Codex (OpenAI Responses) -------------

CLAUDE_CODE_SCHEMA = "https://json.schemastore.org/claude-code-settings.json"
# Claude Code's switches for a self-hosted server (2.1.x): no telemetry, error reports, update checks or
# other calls to Anthropic (NONESSENTIAL_TRAFFIC covers the rest), and no experimental beta fields in
# requests (a server that is not Anthropic's would refuse what it does not know).
CLAUDE_CODE_QUIET = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_EXPERIMENTAL_BETAS": "1",
}
CODEX_PROVIDER = "controlpanel"


def require_api(target: ClientTarget, path: str, client: str) -> None:
    """NotExportable when the revision's engine does not serve `path` (the front door would refuse
    every request of that client): its adapter's `api_paths`."""
    try:
        paths = get_adapter(target.engine).api_paths
    except EngineConfigError:
        return
    if path not in paths:
        raise NotExportable(f"{client} calls {path}, which {engine_label(target.engine)} does not serve")


def anthropic_base_url(target: ClientTarget) -> str:
    """The server's root: Anthropic's clients append /v1/messages themselves."""
    url = target.base_url
    return url[: -len("/v1")] if url.endswith("/v1") else url


def claude_code_settings(target: ClientTarget) -> Export:
    """~/.claude/settings.json: Claude Code on the server's Anthropic Messages API (/v1/messages).

    `env` names the server (ANTHROPIC_BASE_URL, without /v1) and the model for every role Claude
    Code has (its main model and the opus, sonnet and haiku defaults its background calls use), the
    window it compacts by (CLAUDE_CODE_AUTO_COMPACT_WINDOW: the served context) and its reply cap,
    and turns its own traffic off (`CLAUDE_CODE_QUIET`). The key is never in the file:
    `apiKeyHelper` prints it from the user's environment when Claude Code starts (sent as x-api-key
    and as a bearer token), or EMPTY when the server takes none."""
    context = target.require_context("Claude Code")
    target.require_reachable("Claude Code")
    require_api(target, "/v1/messages", "Claude Code")
    model = target.served_name
    env = {
        "ANTHROPIC_BASE_URL": anthropic_base_url(target),
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": model,
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(context),
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(target.max_output or default_max_output(context)),
        **CLAUDE_CODE_QUIET,
    }
    helper = f"printenv {target.key_env}" if target.api_key_required else f"echo {NO_KEY}"
    settings = {"$schema": CLAUDE_CODE_SCHEMA, "model": model, "apiKeyHelper": helper, "env": env}
    return Export("settings.json", json.dumps(settings, indent=2) + "\n", "json")


def _toml_str(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid TOML basic string


def codex_config(target: ClientTarget) -> Export:
    """~/.codex/config.toml: a model provider on the server's OpenAI Responses API
    (`wire_api = "responses"`, Codex's only one), the served model and its context window
    (`model_context_window`: Codex compacts by it), Codex's update check, analytics, feedback and
    plugins off (0.171.0 resolves api.github.com and chatgpt.com for its plugins even in `codex
    exec`; with them off it reaches nothing but the server). The key is read from the environment
    variable `env_key` names; without one (an open server) Codex sends none."""
    context = target.require_context("Codex")
    target.require_reachable("Codex")
    require_api(target, "/v1/responses", "Codex")
    lines = [
        f"# ~/.codex/config.toml for Codex: {target.served_name} at {target.base_url} (the OpenAI Responses API)",
        f"# Context: {target.context_note}",
        f"model = {_toml_str(target.served_name)}",
        f"model_provider = {_toml_str(CODEX_PROVIDER)}",
        f"model_context_window = {context}",
        "check_for_update_on_startup = false",
        "",
        f"[model_providers.{CODEX_PROVIDER}]",
        f"name = {_toml_str(f'{target.served_name} ({engine_label(target.engine)})')}",
        f"base_url = {_toml_str(target.base_url)}",
        'wire_api = "responses"',
    ]
    if target.api_key_required:
        lines.append(f"env_key = {_toml_str(target.key_env)}")
    lines += ["", "[analytics]", "enabled = false", "", "[feedback]", "enabled = false", ""]
    lines += ["[features]", "plugins = false  # its plugin sync calls api.github.com and chatgpt.com at every start"]
    return Export("config.toml", "\n".join(lines) + "\n", "toml")


# -- generic OpenAI-compatible -------------------------------------------------------------


def curl_snippet(target: ClientTarget) -> Export:
    auth = f' \\\n  -H "Authorization: Bearer ${{{target.key_env}}}"' if target.api_key_required else ""
    body: dict[str, Any] = {"model": target.served_name}
    if target.completions:  # a base model continues text: a prompt, at /completions
        body |= {"prompt": "The three primary colours are", "max_tokens": 64}
    else:
        body |= {"messages": [{"role": "user", "content": "Say hello in one sentence."}], "max_tokens": 256}
    path = "/completions" if target.completions else "/chat/completions"
    lines = [
        f"# {target.served_name}: the id below must match what /v1/models lists.",
        f"# Context: {target.context_note}",
        f"curl -s {shlex.quote(target.base_url + '/models')}{auth}",
        "",
        f"curl -s {shlex.quote(target.base_url + path)} \\",
        '  -H "Content-Type: application/json"' + auth + " \\",
        f"  -d {shlex.quote(json.dumps(body))}",
    ]
    return Export("request.sh", "\n".join(lines) + "\n", "bash")


def python_snippet(target: ClientTarget) -> Export:
    key = f'os.environ["{target.key_env}"]' if target.api_key_required else repr(NO_KEY)
    lines = [f"# {target.served_name} through the openai client. Context: {target.context_note}"]
    lines += ["import os", ""] if target.api_key_required else [""]
    lines += ["from openai import OpenAI", "", f"client = OpenAI(base_url={target.base_url!r}, api_key={key})"]
    if target.completions:  # a base model continues text
        lines += [
            "reply = client.completions.create(",
            f"    model={target.served_name!r},",
            '    prompt="The three primary colours are",',
            "    max_tokens=64,",
            ")",
            "print(reply.choices[0].text)",
        ]
        return Export("client.py", "\n".join(lines) + "\n", "python")
    lines += [
        "reply = client.chat.completions.create(",
        f"    model={target.served_name!r},",
        '    messages=[{"role": "user", "content": "Say hello in one sentence."}],',
        "    max_tokens=256,",
        ")",
        "print(reply.choices[0].message.content)",
    ]
    if target.reasoning:
        lines.append('print(getattr(reply.choices[0].message, "reasoning_content", None))  # the <think> part')
    return Export("client.py", "\n".join(lines) + "\n", "python")


# -- all of them ---------------------------------------------------------------------------


CLIENT_EXPORTS: dict[str, tuple[str, Any]] = {
    "opencode": ("opencode", opencode_config),
    "hermes": ("Hermes Agent", hermes_config),
    "aider-settings": ("Aider model settings", aider_model_settings),
    "aider-metadata": ("Aider model metadata", aider_model_metadata),
    "aider-env": ("Aider environment", aider_env),
    "claude-code": ("Claude Code (~/.claude/settings.json)", claude_code_settings),
    "codex": ("Codex (~/.codex/config.toml)", codex_config),
    "curl": ("curl", curl_snippet),
    "python": ("Python (openai)", python_snippet),
}


# What the real tool refuses that its file cannot fix: said on the page and by `manage.py export`.
CLIENT_WARNINGS: dict[str, Any] = {"hermes": hermes_warnings}


# The exports that send completions for a completions model; every other client chats.
COMPLETION_CLIENTS = frozenset({"curl", "python"})


def client_warnings(key: str, target: ClientTarget) -> tuple[str, ...]:
    """Why the client `key` would refuse the revision even with its exported file, or get noise from it
    (() when neither)."""
    check = CLIENT_WARNINGS.get(key)
    said = tuple(check(target)) if check else ()
    if target.completions and key not in COMPLETION_CLIENTS:
        said += (
            f"{target.served_name} is a completions model (a base model, as the catalog says): this client chats, "
            "and a base model answers chats with noise. Serve an instruction-tuned model for it",
        )
    return said


def client_exports(target: ClientTarget) -> list[NamedExport]:
    """Every client config for a target, in the order a page lists them; one that cannot be
    exported carries its reason instead, and one its tool would refuse says why (`warnings`)."""
    out = []
    for key, (title, build) in CLIENT_EXPORTS.items():
        try:
            out.append(NamedExport(key, title, build(target), warnings=client_warnings(key, target)))
        except NotExportable as exc:
            out.append(NamedExport(key, title, None, str(exc)))
    return out


def all_exports(
    view: RevisionView, *, base_url: str, api_key_required: bool, max_output: int | None = None
) -> list[NamedExport]:
    """Every client config for a revision, in the order a page lists them."""
    target = client_target(view, base_url=base_url, api_key_required=api_key_required, max_output=max_output)
    return client_exports(target)

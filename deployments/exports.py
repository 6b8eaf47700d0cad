"""Client configs for a revision: opencode, Hermes Agent, Aider, curl and the openai client.

Pure: a RevisionView, the server's base URL and whether it wants an API key go in; each
export comes out as (filename, content, language) for a download or copy button.

No secret can appear: a view only names secrets, and the key is always a placeholder
(`{env:LLM_API_KEY}` for opencode's own substitution, `${LLM_API_KEY}` elsewhere) or
`EMPTY` when the server takes none. The context written into each config is the one the
server really runs with (deployments.diffing.context): for llama.cpp that is the per-slot
context, ctx_size / parallel, because one request can never use more than its slot.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

from deployments.diffing.context import ServedContext, revision_context, vision_state
from deployments.diffing.view import RevisionView, engine_label

API_KEY_ENV = "LLM_API_KEY"
NO_KEY = "EMPTY"  # what OpenAI clients send when the server takes no key (seed 2, §4 i)
OPENCODE_SCHEMA = "https://opencode.ai/config.json"
HERMES_COMPRESSION_THRESHOLD = 0.75  # seed 2 §4 c: use the window before the lossy summary pass
MAX_OUTPUT_CAP = 32768


class Export(NamedTuple):
    filename: str
    content: str
    language: str  # "json" | "yaml" | "bash" | "python": the code block's highlighting


@dataclass(frozen=True)
class NamedExport:
    key: str
    title: str
    export: Export


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

    @property
    def context_tokens(self) -> int | None:
        return self.context.per_sequence

    @property
    def key_placeholder(self) -> str:
        return f"${{{API_KEY_ENV}}}" if self.api_key_required else NO_KEY

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


def default_max_output(context: int | None) -> int | None:
    """A reply budget that leaves room for the prompt: a quarter of the context, at most 32K."""
    return min(MAX_OUTPUT_CAP, context // 4) if context else None


def client_target(
    view: RevisionView, *, base_url: str, api_key_required: bool, max_output: int | None = None
) -> ClientTarget:
    ctx = revision_context(view)
    vision, _why = vision_state(view)
    reasoning = bool(view.knobs.get("reasoning_parser") or view.model.get("reasoning_parser"))
    return ClientTarget(
        served_name=view.served_name or view.model_name,
        base_url=_clean_url(base_url),
        context=ctx,
        vision=bool(vision),
        api_key_required=api_key_required,
        reasoning=reasoning,
        engine=view.engine,
        max_output=max_output or default_max_output(ctx.per_sequence),
    )


def _yaml_str(text: str) -> str:
    return json.dumps(text)  # a JSON string is a valid double-quoted YAML scalar


# -- opencode ---------------------------------------------------------------------------


def opencode_config(target: ClientTarget, *, provider_id: str = "selfhosted", provider_name: str = "") -> Export:
    """opencode.json: a custom provider on @ai-sdk/openai-compatible (opencode.ai/config.json).

    Without `modalities` opencode treats a custom model as text-only and refuses images,
    so it is set exactly when the server takes images (seed 1)."""
    model: dict[str, object] = {"name": target.served_name}
    if target.context_tokens:
        model["limit"] = {"context": target.context_tokens, "output": target.max_output}
    if target.vision:
        model["attachment"] = True
        model["modalities"] = {"input": ["text", "image"], "output": ["text"]}
    if target.reasoning:
        model["reasoning"] = True
    options: dict[str, str] = {"baseURL": target.base_url}
    if target.api_key_required:
        options["apiKey"] = f"{{env:{API_KEY_ENV}}}"
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


def hermes_config(target: ClientTarget) -> Export:
    """~/.hermes/config.yaml: the seed's hint (provider openai-api, api_base, api_key, name) plus
    model.context_length = the server's real context, and compression at 0.75 of it."""
    lines = [
        f"# Hermes Agent: {target.served_name} at {target.base_url}",
        "# context_length must match the server, or Hermes compresses conversations too early (or too late).",
        f"# Context: {target.context_note}",
        "model:",
        "  provider: openai-api",
        f"  api_base: {_yaml_str(target.base_url)}",
        f"  api_key: {_yaml_str(target.key_placeholder)}"
        + ("  # keep the key itself in ~/.hermes/.env" if target.api_key_required else ""),
        f"  name: {_yaml_str(target.served_name)}",
    ]
    if target.context_tokens:
        lines.append(f"  context_length: {target.context_tokens}")
    lines += ["compression:", "  enabled: true", f"  threshold: {HERMES_COMPRESSION_THRESHOLD}"]
    return Export("config.yaml", "\n".join(lines) + "\n", "yaml")


# -- Aider -------------------------------------------------------------------------------


def aider_name(target: ClientTarget) -> str:
    return f"openai/{target.served_name}"  # aider routes OpenAI-compatible servers by this prefix


def aider_model_settings(target: ClientTarget) -> Export:
    lines = [
        f"# .aider.model.settings.yml for {target.served_name} at {target.base_url}",
        f"- name: {_yaml_str(aider_name(target))}",
        "  edit_format: diff",
        "  use_repo_map: true",
    ]
    if target.max_output:
        lines += ["  extra_params:", f"    max_tokens: {target.max_output}"]
    return Export(".aider.model.settings.yml", "\n".join(lines) + "\n", "yaml")


def aider_model_metadata(target: ClientTarget) -> Export:
    entry: dict[str, object] = {
        "litellm_provider": "openai",
        "mode": "chat",
        "input_cost_per_token": 0,
        "output_cost_per_token": 0,
    }
    if target.context_tokens:
        entry["max_input_tokens"] = target.context_tokens
        entry["max_tokens"] = target.max_output
        entry["max_output_tokens"] = target.max_output
    if target.vision:
        entry["supports_vision"] = True
    content = json.dumps({aider_name(target): entry}, indent=2) + "\n"
    return Export(".aider.model.metadata.json", content, "json")


def aider_env(target: ClientTarget) -> Export:
    key = f'"${{{API_KEY_ENV}}}"' if target.api_key_required else NO_KEY
    lines = [
        "# Point aider at the server (or put openai-api-base / model in .aider.conf.yml).",
        f"export OPENAI_API_BASE={shlex.quote(target.base_url)}",
        f"export OPENAI_API_KEY={key}",
        f"aider --model {shlex.quote(aider_name(target))}",
    ]
    return Export("aider.sh", "\n".join(lines) + "\n", "bash")


# -- generic OpenAI-compatible -------------------------------------------------------------


def curl_snippet(target: ClientTarget) -> Export:
    auth = f' \\\n  -H "Authorization: Bearer ${{{API_KEY_ENV}}}"' if target.api_key_required else ""
    body = {
        "model": target.served_name,
        "messages": [{"role": "user", "content": "Say hello in one sentence."}],
        "max_tokens": 256,
    }
    lines = [
        f"# {target.served_name}: the id below must match what /v1/models lists.",
        f"# Context: {target.context_note}",
        f"curl -s {shlex.quote(target.base_url + '/models')}{auth}",
        "",
        f"curl -s {shlex.quote(target.base_url + '/chat/completions')} \\",
        '  -H "Content-Type: application/json"' + auth + " \\",
        f"  -d {shlex.quote(json.dumps(body))}",
    ]
    return Export("request.sh", "\n".join(lines) + "\n", "bash")


def python_snippet(target: ClientTarget) -> Export:
    key = f'os.environ["{API_KEY_ENV}"]' if target.api_key_required else repr(NO_KEY)
    lines = [f"# {target.served_name} through the openai client. Context: {target.context_note}"]
    lines += ["import os", ""] if target.api_key_required else [""]
    lines += [
        "from openai import OpenAI",
        "",
        f"client = OpenAI(base_url={target.base_url!r}, api_key={key})",
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


def all_exports(
    view: RevisionView, *, base_url: str, api_key_required: bool, max_output: int | None = None
) -> list[NamedExport]:
    """Every client config for a revision, in the order a page lists them."""
    target = client_target(view, base_url=base_url, api_key_required=api_key_required, max_output=max_output)
    return [
        NamedExport("opencode", "opencode", opencode_config(target)),
        NamedExport("hermes", "Hermes Agent", hermes_config(target)),
        NamedExport("aider-settings", "Aider model settings", aider_model_settings(target)),
        NamedExport("aider-metadata", "Aider model metadata", aider_model_metadata(target)),
        NamedExport("aider-env", "Aider environment", aider_env(target)),
        NamedExport("curl", "curl", curl_snippet(target)),
        NamedExport("python", "Python (openai)", python_snippet(target)),
    ]

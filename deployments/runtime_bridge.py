"""Turn stored rows into the pure engine contract (EngineConfig) and back.

This is the one place that knows how a ModelVariant names its weights for each engine.
Secrets are resolved only when `resolve_secrets=True`, which only the host agent does.
"""

from __future__ import annotations

from typing import Any

from deployments.models import DeploymentRevision, ModelVariant
from serving.engines.base import EngineConfig


def model_reference(model: ModelVariant, engine: str) -> str:
    """What the engine loads: a GGUF path for llama.cpp, a tag for Ollama, else the repo id."""
    if engine == "llama.cpp":
        return model.gguf_file or model.repo_id or model.name
    if engine == "ollama":
        return model.name if model.format == "ollama" else (model.repo_id or model.name)
    return model.repo_id or model.name


def launch_knobs(*, engine: str, model: ModelVariant, knobs: dict[str, Any]) -> dict[str, Any]:
    """The knobs as the launch passes them to the engine: `vision` (a panel-side switch) taken out,
    and a vision GGUF's projector added as `mmproj` unless the revision turned vision off or names
    one itself. The planner reads these too, so its findings judge the command the page shows."""
    knobs = dict(knobs)
    wants_vision = knobs.pop("vision", True)
    if engine == "llama.cpp" and model.mmproj_file and wants_vision and "mmproj" not in knobs:
        knobs["mmproj"] = model.mmproj_file
    return knobs


def engine_config_for_values(
    *,
    engine: str,
    engine_version: str,
    model: ModelVariant,
    knobs: dict[str, Any],
    env: dict[str, str],
    served_name: str,
    port: int,
    host: str = "127.0.0.1",
    api_key: str | None = None,
    binary: str | None = None,
) -> EngineConfig:
    knobs = launch_knobs(engine=engine, model=model, knobs=knobs)
    return EngineConfig(
        engine=engine,
        engine_version=engine_version,
        model=model_reference(model, engine),
        served_name=served_name,
        host=host,
        port=port,
        knobs=knobs,
        env=dict(env),
        api_key=api_key,
        binary=binary,
    )


def engine_config_for_revision(
    revision: DeploymentRevision,
    *,
    bind_host: str = "0.0.0.0",  # noqa: S104 - engines serve the LAN; the host firewall decides
    resolve_secrets: bool = False,
    binary: str | None = None,
) -> EngineConfig:
    api_key = None
    if resolve_secrets and revision.api_key_secret:
        from deployments.services.secrets import secret_reveal

        api_key = secret_reveal(host=revision.host, name=revision.api_key_secret)
    return engine_config_for_values(
        engine=revision.engine,
        engine_version=revision.engine_version,
        model=revision.model_variant,
        knobs=revision.knobs,
        env=revision.env,
        served_name=revision.served_name,
        port=revision.port,
        host=bind_host,
        api_key=api_key,
        binary=binary,
    )

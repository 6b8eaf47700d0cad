"""Rows -> the one serving spec (serving.launch): a revision's `RevisionSpec`, its host's
`HostFacts`, and their `launch`. Every page, export, the API and the agent's order get the
command a revision runs from here, so they cannot disagree.

Secrets are resolved only when `resolve_secrets=True`, which only the agent's order does.
"""

from __future__ import annotations

import re
import socket
from typing import Any

from django.conf import settings

from deployments.engine_installs import revision_binary
from deployments.models import DeploymentRevision, HostModel, ModelVariant
from deployments.services.secrets import secret_reveal
from hardware.models import Host
from serving.engines.base import EngineConfig, EngineConfigError, LaunchSpec, ModelRef
from serving.engines.registry import get_adapter
from serving.launch import HostFacts, RevisionSpec, engine_config, launch

_BIND_HOST = re.compile(r"[A-Za-z0-9.:\[\]_-]{1,255}")


def engine_bind_host(host: Host) -> str:
    """The address engines on `host` bind to, as its agent launches them.

    The agent binds CONTROLPANEL_ENGINE_BIND_HOST of its own process and reports it at hello
    and with every probe (`engine_state["bind_host"]`): that is the truth. Until it has, the
    panel's own setting, which is the agent's wherever the panel and the agent share one
    configuration (the embedded default, docker-compose)."""
    state = getattr(host, "engine_state", None)
    reported = state.get("bind_host") if isinstance(state, dict) else None
    if isinstance(reported, str) and _BIND_HOST.fullmatch(reported):
        return reported
    return str(settings.ENGINE_BIND_HOST)


def runs_on_this_machine(host: Host) -> bool:
    """The host is the panel's own machine: the embedded agent registers under this machine's
    short host name (hostagent.probe.local_host_name), so a loopback address reaches it here."""
    return host.name == (socket.gethostname().split(".")[0].lower() or "localhost")


def model_ref(model: ModelVariant) -> ModelRef:
    return ModelRef(
        name=model.name,
        repo_id=model.repo_id,
        gguf_file=model.gguf_file,
        format=model.format,
        mmproj_file=model.mmproj_file,
        native_context=model.model_arch.native_context,
        purpose=model.purpose,
    )


def spec_for_values(
    *,
    engine: str,
    engine_version: str,
    model: ModelVariant,
    knobs: dict[str, Any],
    env: dict[str, str],
    served_name: str = "",
    port: int = 8080,
    api_key_secret: str = "",
    hf_token_secret: str = "",
) -> RevisionSpec:
    return RevisionSpec(
        engine=engine,
        version=engine_version,
        model=model_ref(model),
        knobs=dict(knobs or {}),
        env=dict(env or {}),
        served_name=served_name,
        port=port,
        api_key_secret=api_key_secret,
        hf_token_secret=hf_token_secret,
    )


# The revision's columns that make its spec, each under spec_for_values' own name.
SPEC_COLUMNS = ("engine_version", "knobs", "env", "served_name", "port", "api_key_secret", "hf_token_secret")


def revision_values(revision: DeploymentRevision) -> dict[str, Any]:
    """A revision's spec inputs, as spec_for_values (and the planner, for its share) take them."""
    values = {column: getattr(revision, column) for column in SPEC_COLUMNS}
    return values | {"engine": revision.engine, "model": revision.model_variant}


def revision_spec(revision: DeploymentRevision) -> RevisionSpec:
    return spec_for_values(**revision_values(revision))


def local_weights(host: Host, model: ModelVariant) -> str | None:
    """The copy a download put on the host's disk (its path), which the engine opens instead of
    the hub's name; None when there is none."""
    copy = HostModel.objects.filter(host=host, model_variant=model).only("path").first()
    return copy.path if copy is not None and copy.path.startswith("/") else None


def host_facts(host: Host, *, model: ModelVariant | None = None, binary: str | None = None) -> HostFacts:
    """What the panel knows of `host` for a launch serving `model` with `binary`: where its
    agent binds, where clients reach it, its copy of the weights, its model folders."""
    dirs = tuple(d for d in (host.model_dirs or []) if isinstance(d, str))
    return HostFacts(
        bind_host=engine_bind_host(host),
        reachable_address=(host.address or "").strip(),
        binary=binary,
        local_weights=local_weights(host, model) if model is not None else None,
        model_dirs=dirs,
    )


def revision_host_facts(revision: DeploymentRevision) -> HostFacts:
    """The host facts of `revision`'s launch, with the executable the host recorded installing
    for its engine version (deployments.engine_installs)."""
    return host_facts(revision.host, model=revision.model_variant, binary=revision_binary(revision))


def model_reference(model: ModelVariant, engine: str) -> str:
    """What `engine` loads for `model` with no host copy (the adapter's fact)."""
    return get_adapter(engine).model_reference(model_ref(model))


def launch_knobs(*, engine: str, model: ModelVariant, knobs: dict[str, Any]) -> dict[str, Any]:
    """The knobs as the launch passes them to the engine (the adapter's fact); the planner reads
    these too, so its findings judge the command the page shows."""
    try:
        return get_adapter(engine).launch_knobs(knobs, model_ref(model))
    except EngineConfigError:  # an engine no adapter knows: the planner says so itself
        return {k: v for k, v in knobs.items() if k != "vision"}


def revision_launch_spec(revision: DeploymentRevision, *, api_key: str | None = None) -> LaunchSpec:
    """What the host runs for `revision` (serving.launch.launch); the API key masked unless given.
    EngineConfigError when the engine would refuse the revision's settings."""
    return launch(revision_spec(revision), revision_host_facts(revision), api_key=api_key)


def engine_config_for_revision(
    revision: DeploymentRevision,
    *,
    resolve_secrets: bool = False,
    facts: HostFacts | None = None,
) -> EngineConfig:
    """The engine contract of `revision` (bench scripts and concern checks read it). With
    `resolve_secrets` the API key is the secret's value (the agent's order only)."""
    api_key = None
    if resolve_secrets and revision.api_key_secret:
        api_key = secret_reveal(host=revision.host, name=revision.api_key_secret)
    return engine_config(revision_spec(revision), facts or revision_host_facts(revision), api_key=api_key)

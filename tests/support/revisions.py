"""Revisions in tests: made through the service (revision_create), so every rule a user meets holds.

`make_revision(host=..., model_variant=..., **overrides)` takes a revision's fields by the names the
form uses (engine, engine_version, knobs, env, served_name, port, api_key_secret, hf_token_secret)
and builds the RevisionSpec the service takes; values are passed as given, so a test of a refusal can
hand it hostile ones. `port=None` is the engine's default port.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deployments.runtime_bridge import model_ref
from deployments.services.revisions import revision_create
from serving.launch import RevisionSpec

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

    from deployments.models import DeploymentRevision, ModelVariant
    from hardware.models import Host


def revision_spec_of(
    *,
    model_variant: ModelVariant,
    engine: str = "llama.cpp",
    engine_version: str = "",
    knobs: dict[str, Any] | None = None,
    env: dict[str, Any] | None = None,
    served_name: str = "",
    port: Any = None,
    api_key_secret: str = "",
    hf_token_secret: str = "",
) -> RevisionSpec:
    """The spec of a revision with these fields (None port: the engine's default)."""
    return RevisionSpec(
        engine=engine,
        version=engine_version,
        model=model_ref(model_variant),
        knobs=knobs if knobs is not None else {},
        env=env if env is not None else {},
        served_name=served_name,
        port=0 if port is None else port,
        api_key_secret=api_key_secret,
        hf_token_secret=hf_token_secret,
    )


def make_revision(
    *,
    host: Host,
    model_variant: ModelVariant,
    message: str = "a test revision",
    tag: str = "",
    parent: DeploymentRevision | None = None,
    extras: dict[str, Any] | None = None,
    actor: AbstractUser | None = None,
    **fields: Any,
) -> DeploymentRevision:
    """A new revision of `host` made by revision_create (ValidationError as a user would get it);
    `fields`: revision_spec_of's (engine llama.cpp unless given)."""
    spec = revision_spec_of(model_variant=model_variant, **fields)
    revision: DeploymentRevision = revision_create(
        host=host, spec=spec, message=message, tag=tag, parent=parent, extras=extras, actor=actor
    )
    return revision

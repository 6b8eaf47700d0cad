"""Creating revisions (immutable), and commenting on them."""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from controlpanel.roles import OPERATOR, VIEWER, ensure_role
from deployments.choices import Engine
from deployments.models import DeploymentRevision, ModelVariant, RevisionComment

from .audit import audit_record

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Values of these must live in the secret store, never in a revision.
SECRET_ENV_NAMES = {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY", "LLAMA_API_KEY", "OPENAI_API_KEY"}


def _validate_env(env: dict[str, Any]) -> dict[str, str]:
    clean: dict[str, str] = {}
    for name, value in env.items():
        if not ENV_NAME.match(str(name)):
            raise ValidationError({"env": f"{name!r} is not a valid environment variable name."})
        if name.upper() in SECRET_ENV_NAMES:
            raise ValidationError({"env": f"{name} is a secret: store it as a host secret and reference it by name."})
        text = str(value)
        if "\n" in text or "\x00" in text:
            raise ValidationError({"env": f"The value of {name} contains a newline or NUL byte."})
        clean[str(name)] = text
    return clean


def validate_engine_knobs(
    *,
    engine: str,
    engine_version: str,
    model: ModelVariant,
    knobs: dict[str, Any],
    env: dict[str, str],
    served_name: str,
    port: int,
) -> None:
    """Ask the engine's adapter whether it would accept these knobs (raises ValidationError)."""
    from deployments.engines.base import EngineConfigError
    from deployments.runtime_bridge import engine_config_for_values

    try:
        config = engine_config_for_values(
            engine=engine,
            engine_version=engine_version,
            model=model,
            knobs=knobs,
            env=env,
            served_name=served_name,
            port=port,
        )
        from deployments.engines.registry import get_adapter

        get_adapter(engine).validate(config)
    except EngineConfigError as exc:
        raise ValidationError({exc.field or "knobs": str(exc)}) from exc


@transaction.atomic
def revision_create(
    *,
    host: Any,
    engine: str,
    model_variant: ModelVariant,
    message: str,
    engine_version: str = "",
    knobs: dict[str, Any] | None = None,
    env: dict[str, Any] | None = None,
    served_name: str = "",
    port: int | None = None,
    tag: str = "",
    parent: DeploymentRevision | None = None,
    api_key_secret: str = "",
    hf_token_secret: str = "",
    extras: dict[str, Any] | None = None,
    validate_knobs: bool = True,
    actor: Any,
) -> DeploymentRevision:
    """Record a new immutable revision for `host`; its parent is `parent` or the host's latest."""
    ensure_role(actor, OPERATOR)
    if not (message or "").strip():
        raise ValidationError({"message": "A revision needs a message saying what changed and why."})
    if engine not in Engine.values:
        raise ValidationError({"engine": f"Unknown engine {engine!r}; choose one of {', '.join(Engine.values)}."})
    if parent is not None and parent.host_id != host.pk:
        raise ValidationError({"parent": "The parent revision belongs to another host."})
    knobs = dict(knobs or {})
    env = _validate_env(dict(env or {}))
    port = int(port) if port else 8000
    if not 1 <= port <= 65535:
        raise ValidationError({"port": "A port is between 1 and 65535."})
    for secret_field, secret_name in (
        ("api_key_secret", api_key_secret),
        ("hf_token_secret", hf_token_secret),
    ):
        if secret_name and not host.secrets.filter(name=secret_name).exists():
            raise ValidationError({secret_field: f"Host {host.name} has no secret named {secret_name!r}."})
    if validate_knobs:
        validate_engine_knobs(
            engine=engine,
            engine_version=engine_version,
            model=model_variant,
            knobs=knobs,
            env=env,
            served_name=served_name,
            port=port,
        )

    # Lock the host row so two writers cannot take the same number.
    type(host).objects.select_for_update().filter(pk=host.pk).first()
    last = DeploymentRevision.objects.filter(host=host).aggregate(n=Max("number"))["n"] or 0
    if parent is None and last:
        parent = DeploymentRevision.objects.get(host=host, number=last)
    revision = DeploymentRevision(
        host=host,
        number=last + 1,
        parent=parent,
        engine=engine,
        engine_version=engine_version,
        model_variant=model_variant,
        knobs=knobs,
        env=env,
        served_name=served_name,
        port=port,
        api_key_secret=api_key_secret,
        hf_token_secret=hf_token_secret,
        extras=extras or {},
        author=actor if getattr(actor, "pk", None) else None,
        message=message.strip(),
        tag=tag.strip(),
    )
    revision.full_clean()
    revision.save()
    audit_record(
        action="revision.create",
        summary=f"{host.name} r{revision.number}: {revision.message.splitlines()[0][:200]}",
        obj=revision,
        host=host,
        data={"number": revision.number, "parent": parent.number if parent else None, "tag": revision.tag},
        actor=actor,
    )
    return revision


@transaction.atomic
def comment_create(*, revision: DeploymentRevision, body: str, actor: Any) -> RevisionComment:
    ensure_role(actor, VIEWER)
    if not body.strip():
        raise ValidationError({"body": "A comment cannot be empty."})
    comment = RevisionComment(revision=revision, author=actor, body=body.strip())
    comment.full_clean()
    comment.save()
    audit_record(
        action="revision.comment",
        summary=f"comment on {revision.host.name} r{revision.number}",
        obj=revision,
        host=revision.host,
        actor=actor,
    )
    return comment


@transaction.atomic
def revision_mark_active(*, revision: DeploymentRevision, actor: Any, reason: str = "switch") -> None:
    """Point the host at `revision`: only a successful switch (or a demo import) does this."""
    host = revision.host
    previous = host.active_revision_id
    type(host).objects.filter(pk=host.pk).update(active_revision=revision)
    host.active_revision = revision
    audit_record(
        action="host.activate",
        summary=f"{host.name} now serves r{revision.number} ({reason})",
        obj=revision,
        host=host,
        data={"previous_revision_id": previous, "reason": reason},
        actor=actor,
    )

"""Creating revisions (immutable), and commenting on them."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max

from controlpanel.roles import ADMIN, OPERATOR, VIEWER, ensure_role, has_role
from core.audit import audit_record, audited_save
from deployments.choices import Engine
from deployments.models import Deployment, DeploymentRevision, ModelVariant, RevisionComment
from deployments.runtime_bridge import model_ref, revision_spec
from deployments.services.aliases import aliases_follow_switch
from deployments.services.serving_set import free_port
from hardware.models import Host
from serving.engines.base import EngineConfigError
from serving.engines.policy import Concern, check_paths_under
from serving.engines.registry import engines_loading, format_refusal, get_adapter
from serving.launch import HostFacts, RevisionSpec, derive, engine_config
from serving.safety import UnsafeValueError, check_json_value

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser


def _field(name: str | None) -> str:
    """The form field a policy or adapter error belongs beside."""
    if not name:
        return "knobs"
    if name.startswith("env"):
        return "env"
    return "model_variant" if name == "model" else name


def _storable(value: Any, field: str) -> Any:
    try:
        return check_json_value(value, field=field)
    except UnsafeValueError as exc:
        raise ValidationError({field: str(exc)}) from None


# The panel's own web port (scripts/run binds 127.0.0.1:8000): no engine defaults to it, so an
# engine started with its default never collides with the panel on the same machine.
PANEL_DEFAULT_PORT = 8000


def engine_default_port(engine: str) -> int:
    """The port a revision of `engine` gets when none is given: the engine's own default
    (llama.cpp 8080, SGLang 30000, Ollama 11434; vLLM 8001, one above its upstream 8000,
    which is the panel's own port)."""
    try:
        port = get_adapter(engine).default_port
    except EngineConfigError:
        return 8080
    return port + 1 if port == PANEL_DEFAULT_PORT else port


def _port(port: Any, engine: str = "") -> int:
    if isinstance(port, str) and re.fullmatch(r"[0-9]{1,5}", port.strip()):
        port = int(port)
    if port in (None, "", 0):
        return engine_default_port(engine)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValidationError({"port": f"A port is a whole number between 1 and 65535, not {port!r}."})
    return port


def _tag_free(host: Host, tag: str) -> None:
    """A tag names one revision per host: say which one holds it, in words (the database's own
    refusal reads `Constraint "revision_unique_tag_per_host" is violated`)."""
    tag = (tag or "").strip()
    if not tag:
        return
    holder = DeploymentRevision.objects.filter(host=host, tag=tag).values_list("number", flat=True).first()
    if holder is not None:
        raise ValidationError(
            {"tag": f"Tag `{tag}` is already used by r{holder} on {host.name}; choose another tag or leave it empty."}
        )


def revision_concerns(host: Host, spec: RevisionSpec) -> list[Concern]:
    """Validate a revision's engine settings and say what reaches beyond serving.

    Raises ValidationError when the adapter or the environment policy refuses something,
    or when a path lies outside the host's model folders. Returns every concern (paths,
    code, admin-only variables), so callers can require an admin and show them."""
    try:
        concerns = get_adapter(spec.engine).concerns(engine_config(spec, HostFacts()))
        check_paths_under(concerns, host.model_dirs or [], host=host.name)
    except EngineConfigError as exc:
        raise ValidationError({_field(exc.field): str(exc)}) from exc
    return concerns


def gated(concerns: list[Concern]) -> list[Concern]:
    """The concerns only an admin may accept: code that runs, variables nobody vetted."""
    return [c for c in concerns if c.kind in ("code", "privileged")]


def _model_of(spec: RevisionSpec) -> ModelVariant:
    """The catalog row `spec` serves (a model's name is unique)."""
    name = getattr(spec.model, "name", None)
    variant: ModelVariant | None = None
    if isinstance(name, str) and name:
        variant = ModelVariant.objects.filter(name=name).first()
    if variant is None:
        raise ValidationError({"model_variant": f"The catalog has no model named {name!r}."})
    return variant


def _loadable(spec: RevisionSpec, model: ModelVariant, parent: DeploymentRevision | None) -> None:
    """ValidationError when the engine cannot load the model's format (registry.format_refusal),
    beside what the person changed: the model when it changed from the parent's and the engine did
    not, the engine otherwise. (The switch's format_check still refuses rows made before this.)"""
    try:
        why = format_refusal(spec.engine, model.format)
    except EngineConfigError as exc:
        raise ValidationError({_field(exc.field): str(exc)}) from exc
    if not why:
        return
    model_changed = parent is not None and parent.engine == spec.engine and parent.model_variant_id != model.pk
    loading = engines_loading(model.format)
    advice = (
        f"Choose an engine that loads {model.name} ({loading}), or another model."
        if loading
        else f"No engine of the panel loads {model.name}: choose another model."
    )
    raise ValidationError({"model_variant" if model_changed else "engine": f"{why}. {advice}"})


def _checked(
    host: Host, spec: RevisionSpec, actor: AbstractUser | None, parent: DeploymentRevision | None = None
) -> tuple[RevisionSpec, ModelVariant, list[Concern]]:
    """`spec` as it is stored (JSON-safe, its port settled, its model the catalog's row `model`,
    which its engine loads), with the concerns an admin accepts by creating it; ValidationError
    naming the form field otherwise (`parent`: what it was made from, for that field)."""
    model = _model_of(spec)
    _loadable(spec, model, parent)
    knobs = _storable(dict(spec.knobs or {}), "knobs")
    env = _storable(dict(spec.env or {}), "env")
    port = _port(spec.port, spec.engine)
    for name in ("served_name", "version", "api_key_secret", "hf_token_secret"):
        _storable(getattr(spec, name), "engine_version" if name == "version" else name)
    for secret_field in ("api_key_secret", "hf_token_secret"):
        secret_name = getattr(spec, secret_field)
        if secret_name and not host.secrets.filter(name=secret_name).exists():
            raise ValidationError({secret_field: f"Host {host.name} has no secret named {secret_name!r}."})
    spec = replace(spec, model=model_ref(model), knobs=knobs, env=env, port=port)
    concerns = revision_concerns(host, spec)
    needs_admin = gated(concerns)
    if needs_admin and actor is not None and not has_role(actor, ADMIN):
        first = needs_admin[0]
        raise ValidationError(
            {_field(first.field): f"{first.message}: only an admin may create a revision that {first.label}."}
        )
    return spec, model, concerns


@transaction.atomic
def revision_create(
    *,
    host: Host,
    spec: RevisionSpec,
    message: str,
    tag: str = "",
    parent: DeploymentRevision | None = None,
    extras: dict[str, Any] | None = None,
    actor: AbstractUser | None,
) -> DeploymentRevision:
    """Record a new immutable revision for `host` serving `spec` (serving.launch.derive builds it;
    its model names a catalog row); its parent is `parent` or the host's latest."""
    ensure_role(actor, OPERATOR)
    if not (message or "").strip():
        raise ValidationError({"message": "A revision needs a message saying what changed and why."})
    if spec.engine not in Engine.values:
        raise ValidationError({"engine": f"Unknown engine {spec.engine!r}; choose one of {', '.join(Engine.values)}."})
    if parent is not None and parent.host_id != host.pk:
        raise ValidationError({"parent": "The parent revision belongs to another host."})
    extras = _storable(dict(extras or {}), "extras")
    _storable(message, "message")
    _storable(tag, "tag")
    spec, model, concerns = _checked(host, spec, actor, parent)

    # Lock the host row so two writers cannot take the same number (or the same tag).
    type(host).objects.select_for_update().filter(pk=host.pk).first()
    _tag_free(host, tag)
    last = DeploymentRevision.objects.filter(host=host).aggregate(n=Max("number"))["n"] or 0
    if parent is None and last:
        parent = DeploymentRevision.objects.get(host=host, number=last)
    revision = DeploymentRevision(
        host=host,
        number=last + 1,
        parent=parent,
        engine=spec.engine,
        engine_version=spec.version,
        model_variant=model,
        knobs=dict(spec.knobs),
        env=dict(spec.env),
        served_name=spec.served_name,
        port=spec.port,
        api_key_secret=spec.api_key_secret,
        hf_token_secret=spec.hf_token_secret,
        extras=extras or {},
        author=actor if getattr(actor, "pk", None) else None,
        message=message.strip(),
        tag=tag.strip(),
    )
    audited_save(
        revision,
        action="revision.create",
        summary=f"{host.name} r{revision.number}: {revision.message.splitlines()[0][:200]}",
        host=host,
        data={
            "number": revision.number,
            "parent": parent.number if parent else None,
            "tag": revision.tag,
            # What an admin accepted by creating it (runs code, unvetted variables), and the
            # files it opens: recorded with who did it.
            "concerns": [{"field": c.field, "kind": c.kind, "message": c.message} for c in concerns],
        },
        actor=actor,
    )
    return revision


def revision_derive(
    *,
    host: Host,
    parent: DeploymentRevision | None,
    changes: dict[str, Any],
    message: str,
    tag: str = "",
    extras: dict[str, Any] | None = None,
    actor: AbstractUser | None,
) -> DeploymentRevision:
    """Record a new revision made from `parent` with `changes` (serving.launch.derive: the one
    rule the web form, the API and the CLI share). `changes` takes RevisionSpec's fields, with
    `model` a ModelVariant, plus `set` / `set_env` for single knobs and variables (None
    removes one); a value of None is "not given". A port not given is the parent's unless a
    revision that stays in the host's serving set through a switch listens there; then a free one
    (serving_set.free_port), so a switch to the child never puts two engines on one port."""
    model = changes.get("model")
    if model is None and parent is None:
        raise ValidationError({"model_variant": "A host's first revision needs a model."})
    given = {**changes, "model": model_ref(model) if model is not None else None}
    base = revision_spec(parent) if parent is not None else None
    if base is None and given.get("port") is None:
        given["port"] = 0  # the engine's own default port (revision_create)
    elif parent is not None and given.get("port") is None:
        given["port"] = free_port(host, parent)  # never the port of a revision the host serves
    try:
        spec = derive(base, given)
    except EngineConfigError as exc:
        raise ValidationError({_field(exc.field): str(exc)}) from exc
    return revision_create(host=host, spec=spec, tag=tag, message=message, parent=parent, extras=extras, actor=actor)


@transaction.atomic
def comment_create(*, revision: DeploymentRevision, body: str, actor: AbstractUser | None) -> RevisionComment:
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
def revision_mark_active(*, revision: DeploymentRevision, actor: AbstractUser | None, reason: str = "switch") -> None:
    """Point the host at `revision`: only a successful switch (or a demo import) does this."""
    host = revision.host
    deployment = Deployment.objects.select_for_update().filter(host=host).first()
    if deployment is None:  # the host's first: its row is made, then locked as any other
        # A heartbeat and a register that pointed the host at its serving revision at once both
        # found no row and inserted one; the second failed on deployments_deployment_pkey (its
        # agent's report answered 500). ON CONFLICT DO NOTHING waits for the other's row and keeps it.
        Deployment.objects.bulk_create([Deployment(host=host, active_revision=None)], ignore_conflicts=True)
        deployment = Deployment.objects.select_for_update().get(host=host)
    previous = deployment.active_revision_id  # read under the lock: the audit and the aliases follow it
    deployment.active_revision, deployment.serving = revision, True  # a switch means: serve it
    deployment.save(update_fields=["active_revision", "serving"])
    host.deployment = deployment
    aliases_follow_switch(host=host, previous_id=previous, revision=revision, actor=actor)
    audit_record(
        action="host.activate",
        summary=f"{host.name} now serves r{revision.number} ({reason})",
        obj=revision,
        host=host,
        data={"previous_revision_id": previous, "reason": reason},
        actor=actor,
    )

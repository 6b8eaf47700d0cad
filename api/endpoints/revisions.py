"""A host's revisions: list, show, create (from a parent, as the CLI's --from does), diff."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest
from ninja import Router, Status

from api.schemas import DiffOut, Error, ExportOut, ExportTarget, ExportVia, RevisionIn, RevisionList, RevisionOut
from api.serialize import revision_dict
from controlpanel.roles import OPERATOR, VIEWER
from deployments.models import DeploymentRevision, ModelVariant
from deployments.selectors.revision_views import changes_between
from deployments.services.exports import revision_export
from deployments.services.revisions import revision_derive
from serving.exports import NotExportable

from . import host_for, revision_or_404

router = Router(tags=["revisions"])


@router.get("{name}/revisions/", response={200: RevisionList, 404: Error}, summary="A host's revisions, newest first")
def revision_list(request: HttpRequest, name: str) -> dict[str, Any]:
    _, host = host_for(request, name, VIEWER)
    rows = DeploymentRevision.objects.filter(host=host).select_related("host", "model_variant", "author", "parent")
    items = [revision_dict(r, with_argv=False) for r in rows.order_by("-number")]
    return {"items": items, "count": len(items)}


@router.get("{name}/revisions/{number}/", response={200: RevisionOut, 404: Error}, summary="One revision")
def revision_get(request: HttpRequest, name: str, number: int) -> dict[str, Any]:
    _, host = host_for(request, name, VIEWER)
    return revision_dict(revision_or_404(host, number))


def _body_fields(exc: ValidationError) -> ValidationError:
    """The service's refusal under the body's names: the model is `model` here (the service and
    the form call it `model_variant`)."""
    errors = getattr(exc, "error_dict", None)
    if errors is None or "model_variant" not in errors:
        return exc
    return ValidationError({"model" if k == "model_variant" else k: v for k, v in errors.items()})


@router.post(
    "{name}/revisions/",
    response={201: RevisionOut, 400: Error, 403: Error, 404: Error},
    summary="Record a new revision, from a parent (default: the newest) with changes",
)
def revision_new(request: HttpRequest, name: str, payload: RevisionIn) -> Status:
    user, host = host_for(request, name, OPERATOR)
    if payload.parent is not None:
        base: DeploymentRevision | None = DeploymentRevision.objects.filter(host=host, number=payload.parent).first()
        if base is None:
            raise ValidationError({"parent": f"{host.name} has no revision r{payload.parent}."})
    else:
        base = DeploymentRevision.objects.filter(host=host).order_by("-number").first()
    model = None
    if payload.model is not None:
        model = ModelVariant.objects.filter(name=payload.model).first()
        if model is None:
            raise ValidationError({"model": f"No model {payload.model[:80]!r} in the catalog (GET /api/v1/models/)."})
    if base is None and (not payload.engine or model is None):
        raise ValidationError({"engine": "engine and model are needed for a host's first revision."})
    try:
        revision = revision_derive(
            host=host,
            parent=base,
            changes={
                "engine": payload.engine or None,
                "version": payload.engine_version,
                "model": model,
                "knobs": payload.knobs,
                "set": payload.set,
                "env": payload.env,
                "served_name": payload.served_name,
                "port": payload.port,
                "api_key_secret": payload.api_key_secret,
                "hf_token_secret": payload.hf_token_secret,
            },
            tag=payload.tag,
            message=payload.message,
            actor=user,
        )
    except ValidationError as exc:
        raise _body_fields(exc) from exc
    return Status(201, revision_dict(revision_or_404(host, revision.number)))


@router.get("{name}/revisions/{a}/diff/{b}/", response={200: DiffOut, 404: Error}, summary="What changed from ra to rb")
def revision_diff(request: HttpRequest, name: str, a: int, b: int) -> dict[str, Any]:
    _, host = host_for(request, name, VIEWER)
    diff = changes_between(revision_or_404(host, a), revision_or_404(host, b))
    return {
        "old": diff.old_label,
        "new": diff.new_label,
        "model_changed": diff.model_changed,
        "sections": [
            {
                "key": s.key,
                "title": s.title,
                "rows": [
                    {"key": r.key, "old": r.old, "new": r.new, "kind": str(r.kind), "note": r.note} for r in s.rows
                ],
            }
            for s in diff.sections
        ],
    }


@router.get(
    "{name}/revisions/{number}/exports/{target}/",
    response={200: ExportOut, 404: Error, 409: Error},
    summary="One export of a revision, exactly as its target runs it (a client config, the host's launch, group_vars)",
)
def revision_export_get(
    request: HttpRequest, name: str, number: int, target: ExportTarget, via: ExportVia | None = None
) -> Status:
    """`?via=router|door`: a client config through the lab router or the host's own front door
    (default: the router when clients can reach it; notes say where it points)."""
    _, host = host_for(request, name, VIEWER)
    revision = revision_or_404(host, number)
    try:
        made = revision_export(revision, target, via)
    except NotExportable as exc:
        return Status(409, {"detail": f"r{number} of {name} cannot be exported to {target}: {exc}"})
    body = {"target": made.target, "filename": made.filename, "content": made.content, "notes": list(made.notes)}
    return Status(200, body)

"""Models on a host's disk: download one there, record what arrived, list and delete them.

A download is an Operation on the host's queue (not exclusive: it does not touch the GPUs, and
the engine keeps serving while it runs). The order names the repository, the commit the catalog
recorded and only the files the engine needs; for a gated repository the name of a host secret,
which the panel reveals to that host for that operation only (deployments.agent_api.orders), so
the token is never stored in clear on either side. The host reports what it checked with the
operation's end (`host_model_record`), and the engine of a revision then opens that copy.

Deleting a copy is refused while the revision the host serves (or one queued to be switched to)
needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction

from controlpanel.roles import OPERATOR, ensure_role
from core.audit import audit_record, audited_delete
from deployments.choices import ACTIVE_STATES, ModelFormat, OperationKind
from deployments.models import DeploymentRevision, HostModel, ModelVariant, Operation, active_revision_id_of
from hardware.models import Host

from .dispatch import operation_dispatch
from .operations import operation_create
from .secrets import hub_token_check

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

MAX_FILES = 10_000


def downloadable(variant: ModelVariant) -> str:
    """Why `variant` cannot be downloaded by the panel ("" when it can)."""
    if variant.format == ModelFormat.OLLAMA:
        return ""
    if not variant.repo_id or not variant.revision or not variant.hub_files:
        return (
            "it was not imported from a Hugging Face repository (import it by repository id, so the panel knows "
            "the commit and the files)"
        )
    return ""


def download_candidates(*, host: Host) -> Any:
    """The catalog models the panel can download to `host`: imported from a hub with their commit
    and files, or Ollama tags; less those already on it."""
    hub = ModelVariant.objects.exclude(revision="").exclude(hub_files=[])
    ollama = ModelVariant.objects.filter(format=ModelFormat.OLLAMA)
    return (hub | ollama).exclude(copies__host=host).order_by("name")


def download_notes(*, host: Host) -> list[str]:
    """Why the download form offers nothing (or nothing would arrive), each with its fix."""
    notes = []
    if not host.model_dirs:
        notes.append(
            f"{host.name} reports no model folders, and downloads go into its first one: set "
            "CONTROLPANEL_MODEL_DIRS for its agent (default data/models) and restart the agent."
        )
    if not download_candidates(host=host).exists():
        hub = ModelVariant.objects.exclude(revision="").exclude(hub_files=[])
        if hub.exists() or ModelVariant.objects.filter(format=ModelFormat.OLLAMA).exists():
            notes.append(f"Every model the panel can download is already on {host.name} (listed above).")
        else:
            notes.append(
                "No catalog model can be downloaded yet: the starter catalog's models name a repository "
                "but not the commit and files a download needs. Import one by repository id (Models → Import, "
                "or manage.py model import OWNER/NAME), then download it here."
            )
    return notes


def host_model_of(*, host: Host, variant: ModelVariant) -> HostModel | None:
    return HostModel.objects.filter(host=host, model_variant=variant).first()


def download_active(*, host: Host, variant: ModelVariant) -> Operation | None:
    return (
        Operation.objects.filter(
            host=host, kind=OperationKind.DOWNLOAD, state__in=ACTIVE_STATES, params__variant=variant.pk
        )
        .order_by("created_at")
        .first()
    )


@transaction.atomic
def download_request(
    *, host: Host, variant: ModelVariant, token_secret: str = "", actor: AbstractUser | None
) -> Operation:
    """Queue a download of `variant`'s files to `host`. Raises ValidationError (nothing written)
    when the model has no repository facts, is already there or on its way, or the secret is
    not the host's."""
    ensure_role(actor, OPERATOR)
    why = downloadable(variant)
    if why:
        raise ValidationError({"model": f"{variant.name} cannot be downloaded: {why}."})
    copy = host_model_of(host=host, variant=variant)
    if copy is not None:
        raise ValidationError({"model": f"{variant.name} is already on {host.name} at {copy.path}."})
    running = download_active(host=host, variant=variant)
    if running is not None:
        raise ValidationError(
            {"model": f"{variant.name} is already being downloaded to {host.name} ({running.state})."}
        )
    token_secret = (token_secret or "").strip()
    if token_secret:
        hub_token_check(host=host, name=token_secret)  # only a secret an admin marked as a hub token
    if variant.format == ModelFormat.OLLAMA:
        params: dict[str, Any] = {"source": "ollama", "variant": variant.pk, "name": variant.name, "tag": variant.name}
    else:
        params = {
            "source": "hub",
            "variant": variant.pk,
            "name": variant.name,
            "repo_id": variant.repo_id,
            "revision": variant.revision,
            "files": list(variant.hub_files)[:MAX_FILES],
            "gguf_file": variant.gguf_file if variant.format == ModelFormat.GGUF else "",
            "size": sum(int(f.get("size") or 0) for f in variant.hub_files if isinstance(f, dict)),
        }
    if token_secret:
        params["token_secret"] = token_secret
    return operation_create(
        kind=OperationKind.DOWNLOAD, host=host, params=params, enqueue=operation_dispatch, actor=actor
    )


def _host_path(value: Any) -> str:
    text = value if isinstance(value, str) else ""
    ollama = text.startswith("ollama:") and 7 < len(text) <= 300
    if not (text.startswith("/") or ollama) or len(text) > 1000 or any(c in text for c in "\x00\n\r"):
        raise ValidationError({"path": "The host reported a model path that is not an absolute path."})
    return text


def host_model_record(*, op: Operation, report: dict[str, Any]) -> HostModel:
    """What a download put on the host's disk (called inside the operation's end transaction).
    The variant is the one the panel ordered, never one the host names."""
    variant = ModelVariant.objects.get(pk=op.params.get("variant"))
    path = _host_path(report.get("path"))
    size = report.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= 2**50:
        raise ValidationError({"size": "The host reported a size that is not a number of bytes."})
    files = report.get("files") if isinstance(report.get("files"), list) else []
    kept = [
        {"name": str(f.get("name"))[:300], "size": f.get("size"), "sha256": f.get("sha256")}
        for f in files[:MAX_FILES]
        if isinstance(f, dict)
    ]
    copy, _ = HostModel.objects.update_or_create(
        host=op.host,
        model_variant=variant,
        defaults={
            "path": path,
            "repo_id": variant.repo_id,
            "revision": variant.revision,
            "size_bytes": size,
            "files": kept,
            "verified": bool(report.get("verified")),
            "operation": op,
        },
    )
    audit_record(
        action="model.download",
        summary=f"{variant.name} downloaded to {op.host.name} ({size / 2**30:.2f} GiB)",
        obj=copy,
        host=op.host,
        data={"path": path, "size": size, "revision": variant.revision, "operation": str(op.pk)},
        actor=op.requested_by,
    )
    return copy


def host_model_forget(*, op: Operation) -> None:
    """A delete the host carried out: the copy is gone (inside the operation's end transaction)."""
    copy = HostModel.objects.filter(pk=op.params.get("copy"), host=op.host).first()
    if copy is None:
        return
    audited_delete(
        copy,
        action="model.delete",
        summary=f"{copy.model_variant.name} deleted from {op.host.name}",
        host=op.host,
        data={"path": copy.path, "size": copy.size_bytes, "operation": str(op.pk)},
        actor=op.requested_by,
    )


@dataclass(frozen=True)
class HostModelRow:
    copy: HostModel
    revisions: tuple[DeploymentRevision, ...]  # the host's revisions of this model
    serving: DeploymentRevision | None  # the one the host serves now, if it is of this model
    delete_refusal: str  # why it cannot be deleted now ("" when it can)


def _needed_by(host: Host, variant_id: int) -> tuple[DeploymentRevision | None, str]:
    """The revision that needs the copy now, and why ("" when none)."""
    active_id = active_revision_id_of(host)
    if active_id:
        serving = DeploymentRevision.objects.filter(pk=active_id, model_variant_id=variant_id).first()
        if serving is not None:
            return serving, f"r{serving.number} serves it now: switch to another revision first"
    pending = (
        Operation.objects.filter(
            host=host,
            kind__in=(OperationKind.SWITCH, OperationKind.LAUNCH, OperationKind.ROLLBACK, OperationKind.BENCHMARK),
            state__in=ACTIVE_STATES,
            revision__model_variant_id=variant_id,
        )
        .select_related("revision")
        .first()
    )
    if pending is not None and pending.revision is not None:
        return None, f"a {pending.kind} to r{pending.revision.number} is {pending.state} and needs it"
    return None, ""


def host_model_list(*, host: Host) -> list[HostModelRow]:
    copies = list(HostModel.objects.filter(host=host).select_related("model_variant").order_by("path"))
    by_variant: dict[int, list[DeploymentRevision]] = {}
    for revision in DeploymentRevision.objects.filter(
        host=host, model_variant_id__in=[c.model_variant_id for c in copies]
    ).order_by("-number"):
        by_variant.setdefault(revision.model_variant_id, []).append(revision)
    rows = []
    for copy in copies:
        serving, why = _needed_by(host, copy.model_variant_id)
        rows.append(HostModelRow(copy, tuple(by_variant.get(copy.model_variant_id, [])), serving, why))
    return rows


@transaction.atomic
def host_model_delete_request(*, copy: HostModel, actor: AbstractUser | None) -> Operation:
    """Ask the host to delete a downloaded copy; refused while a revision in use needs it."""
    ensure_role(actor, OPERATOR)
    _, why = _needed_by(copy.host, copy.model_variant_id)
    if why:
        raise ValidationError({"model": f"{copy.model_variant.name} cannot be deleted from {copy.host.name}: {why}."})
    return operation_create(
        kind=OperationKind.MODEL_DELETE,
        host=copy.host,
        params={"copy": copy.pk, "variant": copy.model_variant_id, "path": copy.path, "name": copy.model_variant.name},
        enqueue=operation_dispatch,
        actor=actor,
    )

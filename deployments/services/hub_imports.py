"""Import a model into the catalog by its Hugging Face repository id.

The hub is read first, outside any transaction (deployments.importers.hub: model info, config,
safetensors index, generation config, or a GGUF header by HTTP ranges); the variant is then
checked and stored with its audit row. The entry records the repository and the commit it was
read at, and the files a download fetches, with their sizes and checksums.

A gated repository needs a token: the name of a host secret an admin marked as a hub token
(deployments.services.secrets), revealed for the hub call only, never stored on the variant or
written to a log; any other name gets one refusal that names no secret. Each request to the hub
ends within HUB_REQUEST_DEADLINE_S; file names that are not relative paths inside the repository
are skipped (the entry's source says how many), never stored.

From the web an import is a row first (`HubImport`, `hub_import_request`) and runs in the panel's
worker (`hub_import_run`, deployments.tasks.run_hub_import): the request answers at once with the
import's page, which follows it to its result, so a hub that drips its answers holds a worker's
task for at most the deadline, never a web worker. What can be checked without the hub (the
texts, the token's name) is refused at once, with nothing stored. `manage.py model import` reads
the hub itself (`model_variant_import_hub`) and waits, as a command may.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.celery import send_for_row
from controlpanel.roles import OPERATOR, ensure_role
from core.audit import audit_record, person_of
from deployments.choices import ModelFormat, OperationState
from deployments.hub_import_models import HubImport
from deployments.importers.hf_config import HfConfigError, arch_from_hf_config
from deployments.importers.hub import HubError, hub_read
from deployments.models import ModelVariant
from hardware.models import Host
from serving.engines.base import gguf_split_part
from serving.purpose import guess_purpose

from .imports import _gguf_facts, _save_variant, _text_arg, _unique_name, _variant_text, purpose_note
from .secrets import hub_token_reveal

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

    from deployments.importers.hub import HubModel

log = logging.getLogger(__name__)

# HubError.field -> the form field (and command option) it concerns.
FIELDS = {"repo_id": "repo_id", "revision": "revision", "file": "file", "token": "token_secret"}
HUB_IMPORT_TASK = "deployments.tasks.run_hub_import"  # deployments.tasks registers it
# A running import whose worker went away: each of its few hub requests ends within the deadline,
# so one still running after this many deadlines (and a minute) lost its worker.
LOST_AFTER_DEADLINES = 20


def hub_token(ref: str) -> str | None:
    """The token a `HOST/NAME` reference names (the secret NAME of host HOST, which an admin
    marked as a hub token), or None for no reference. Anything else, an unknown host included,
    is refused in the one wording that tells nothing of what exists (ValidationError on
    token_secret)."""
    ref = (ref or "").strip()
    if not ref:
        return None
    host_name, _, name = ref.partition("/")
    if not host_name or not name:
        raise ValidationError({"token_secret": "Name a hub token as HOST/NAME, e.g. gpu1/hf-token."})
    return hub_token_reveal(host=Host.objects.filter(name=host_name).first(), name=name)


def _skipped_note(model: Any) -> str:
    if not model.skipped_names:
        return ""
    return (
        f" Skipped {model.skipped_names} file name(s) the hub listed that are not relative paths inside the repository."
    )


def _name_for(model: Any, given: str) -> str:
    if given.strip():
        return _unique_name(given)
    base = model.repo_id.rsplit("/", 1)[-1]
    if model.gguf_file:
        file = model.gguf_file.rsplit("/", 1)[-1]
        split = gguf_split_part(file)
        stem = split.prefix if split else file[: -len(".gguf")]
        base = stem if base.lower().replace("-gguf", "") in stem.lower() or not base else f"{base}/{stem}"
    name = base[:200]
    if ModelVariant.objects.filter(name=name).exists():
        name = f"{name}@{model.revision[:7]}"[:200]
    return _unique_name(name)


@dataclass(frozen=True)
class HubImportArgs:
    """What an import asks for, checked as far as it can be without the hub."""

    repo_id: str
    revision: str
    gguf_file: str
    name: str
    family: str
    generation: str
    token: str  # HOST/NAME of a hub token, or empty


def _checked_args(
    *, repo_id: str, revision: str, gguf_file: str, name: str, family: str, generation: str, token: str
) -> HubImportArgs:
    args = HubImportArgs(
        repo_id=_variant_text(repo_id, "repo_id"),
        revision=_text_arg(revision, field="revision", max_len=200),
        gguf_file=_text_arg(gguf_file, field="file", max_len=300),
        name=_variant_text(name, "name"),
        family=_variant_text(family, "family"),
        generation=_variant_text(generation, "generation"),
        token=(token or "").strip(),
    )
    if not args.repo_id:
        raise ValidationError({"repo_id": "Give a repository id, e.g. Qwen/Qwen3-32B-AWQ."})
    return args


def model_variant_import_hub(
    *,
    repo_id: str,
    revision: str = "",
    gguf_file: str = "",
    name: str = "",
    family: str = "",
    generation: str = "",
    token: str = "",
    actor: AbstractUser | None,
) -> ModelVariant:
    """A new ModelVariant read from the hub (HF_ENDPOINT honoured), with the hub token `token`
    names as HOST/NAME (`hub_token`). Raises ValidationError keyed by repo_id, revision, file,
    token_secret or name; nothing is stored then. Waits for the hub: the web uses
    `hub_import_request`."""
    ensure_role(actor, OPERATOR)
    args = _checked_args(
        repo_id=repo_id,
        revision=revision,
        gguf_file=gguf_file,
        name=name,
        family=family,
        generation=generation,
        token=token,
    )
    repo_id, revision, gguf_file, name = args.repo_id, args.revision, args.gguf_file, args.name
    family, generation = args.family, args.generation
    secret = hub_token(args.token)
    try:
        model = hub_read(
            repo_id, revision=revision, gguf_file=gguf_file, token=secret, deadline_s=settings.HUB_REQUEST_DEADLINE_S
        )
    except HubError as exc:
        raise ValidationError({FIELDS.get(exc.field, "repo_id"): str(exc)}) from exc
    existing = ModelVariant.objects.filter(
        repo_id=model.repo_id, revision=model.revision, gguf_file=model.gguf_file or ""
    ).first()
    if existing is not None:
        raise ValidationError(
            {"repo_id": f"The catalog already has {model.repo_id} at {model.revision[:12]} as {existing.name!r}."}
        )
    with transaction.atomic():
        variant = (
            _gguf_variant(model, name=name, family=family, generation=generation)
            if model.gguf is not None
            else _hf_variant(model, name=name, family=family, generation=generation)
        )
        return _save_variant(variant, via=f"hub {model.repo_id}", error_key="repo_id", actor=actor)


def _hub_fields(model: HubModel, *, name: str, generation: str) -> dict[str, Any]:
    """The fields every variant read from the hub has: where it came from and what a download fetches."""
    return {
        "name": _name_for(model, name),
        "repo_id": model.repo_id,
        "revision": model.revision,
        "hub_files": [f.to_dict() for f in model.needed_files()],
        "generation": generation,
    }


def _gguf_variant(model: HubModel, *, name: str, family: str, generation: str) -> ModelVariant:
    """The catalog row for a GGUF on the hub, from its header (read by HTTP ranges); not saved."""
    imported = model.gguf
    assert imported is not None
    purpose = imported.purpose(("the file name", model.gguf_file), ("the repository id", model.repo_id))
    return ModelVariant(
        **_hub_fields(model, name=name, generation=generation),
        gguf_file=model.gguf_file or "",
        weights_bytes=imported.file_size or None,
        source=(
            f"Read from the hub: {model.repo_id}@{model.revision}, GGUF header of {model.gguf_file} (HTTP ranges); "
            f"weights: the file size the hub lists."
        )
        + purpose_note(purpose)
        + _skipped_note(model),
        purpose=purpose.purpose,
        **_gguf_facts(imported, family=family),
    )


def _hf_variant(model: HubModel, *, name: str, family: str, generation: str) -> ModelVariant:
    """The catalog row for a safetensors repository, from its config.json; not saved.
    ValidationError (repo_id) for a config the importer refuses."""
    try:
        hf = arch_from_hf_config(model.config_text or "")
    except HfConfigError as exc:
        raise ValidationError({"repo_id": f"{model.repo_id}: {exc}"}) from exc
    quant = hf.quant
    presets = {"generation_config": model.generation_config} if model.generation_config else {}
    weights_note = (
        "weights: the safetensors index's total_size / the safetensors files' sizes"
        if model.index_total_size
        else "weights: unknown (no safetensors index): the planner estimates them from the architecture"
    )
    purpose = guess_purpose([("the repository id", model.repo_id)])
    variant = ModelVariant(
        **_hub_fields(model, name=name, generation=generation),
        purpose=purpose.purpose,
        family=family or (hf.arch.family or ""),
        format=ModelFormat.HF,
        quantization=(quant.method or hf.arch.torch_dtype or "")[:60],
        quant_method=quant.method or "",
        quant_bits=quant.bits,
        quant_group_size=quant.group_size,
        weights_bytes=model.index_total_size,
        arch=hf.arch.to_dict(),
        sampling_presets=presets,
        source=(
            f"Read from the hub: {model.repo_id}@{model.revision} (config.json"
            + (", generation_config.json" if presets else "")
            + f"); {weights_note}."
            + purpose_note(purpose)
            + _skipped_note(model)
        ),
    )
    if hf.arch.params_total is None and model.safetensors_params:
        variant.arch = {**variant.arch, "params_total": model.safetensors_params}
    return variant


# --- from the web: a row first, then the panel's worker ---------------------------------------------


def hub_import_request(
    *,
    repo_id: str,
    revision: str = "",
    gguf_file: str = "",
    name: str = "",
    token: str = "",
    actor: AbstractUser | None,
) -> HubImport:
    """Record an import and hand it to the panel's worker (after the commit); the hub is not
    read here. Raises ValidationError (nothing stored) for what can be refused without the hub:
    a missing or unsafe text, a token name that is not a hub token."""
    ensure_role(actor, OPERATOR)
    args = _checked_args(
        repo_id=repo_id, revision=revision, gguf_file=gguf_file, name=name, family="", generation="", token=token
    )
    hub_token(args.token)  # a name that is not a hub token is refused now; its value is not kept
    with transaction.atomic():
        job = HubImport.objects.create(
            requested_by=person_of(actor),
            repo_id=args.repo_id,
            revision=args.revision,
            gguf_file=args.gguf_file,
            name=args.name,
            token_secret=args.token,
            stage="waiting for the panel's worker",
        )
        audit_record(
            action="model.hub_import",
            summary=f"import of {args.repo_id} from the hub requested",
            obj=job,
            data={"repo_id": args.repo_id, "revision": args.revision, "gguf_file": args.gguf_file},
            actor=actor,
        )
        transaction.on_commit(lambda: _enqueue(job))
    return job


def _enqueue(job: HubImport) -> None:
    """Sent by task name, as operations and notifications are: the task module reads this one."""
    try:
        send_for_row(HUB_IMPORT_TASK, queue=settings.HUB_IMPORT_QUEUE, key="import_id", pk=job.pk)
    except Exception as exc:  # the broker is away: the import says so, the request goes on
        reason = f"It could not be handed to the panel's worker ({type(exc).__name__}): import again later."
        _finish(job.pk, OperationState.FAILED, errors={"repo_id": [reason]})


def hub_import_run(*, import_id: UUID | str) -> HubImport | None:
    """The worker's part: read the hub and store the entry (each hub request within
    HUB_REQUEST_DEADLINE_S), as the person who asked, whose role is checked again now. None when
    the import is gone or was already taken (a message delivered twice acts once)."""
    with transaction.atomic():
        job = (
            HubImport.objects.select_for_update(of=("self",))
            .select_related("requested_by")
            .filter(pk=import_id)
            .first()
        )
        if job is None or job.state != OperationState.QUEUED:
            return None
        job.state, job.started_at, job.stage = OperationState.RUNNING, timezone.now(), "reading the hub"
        job.save(update_fields=["state", "started_at", "stage"])
    try:
        variant = model_variant_import_hub(
            repo_id=job.repo_id,
            revision=job.revision,
            gguf_file=job.gguf_file,
            name=job.name,
            token=job.token_secret,
            actor=job.requested_by,
        )
    except ValidationError as exc:
        errors = exc.message_dict if hasattr(exc, "error_dict") else {"repo_id": exc.messages}
        return _finish(job.pk, OperationState.FAILED, errors=errors)
    except PermissionDenied:
        who = job.requested_by.username if job.requested_by else "the person who asked"
        reason = f"{who} may no longer import models (an operator's role is needed)."
        return _finish(job.pk, OperationState.FAILED, errors={"repo_id": [reason]})
    except Exception as exc:
        log.exception("hub import %s of %s failed", job.pk, job.repo_id)
        reason = (
            f"The import failed unexpectedly ({type(exc).__name__}); nothing was imported. The panel's log has more."
        )
        return _finish(job.pk, OperationState.FAILED, errors={"repo_id": [reason]})
    return _finish(job.pk, OperationState.SUCCEEDED, variant=variant)


def _finish(
    pk: Any, state: str, *, errors: dict[str, list[str]] | None = None, variant: ModelVariant | None = None
) -> HubImport | None:
    with transaction.atomic():
        job = HubImport.objects.select_for_update().filter(pk=pk).first()
        if job is None or not job.is_active:
            return job
        job.state, job.finished_at = state, timezone.now()
        job.stage = "imported" if variant is not None else "ended"
        job.errors = {key: [str(m) for m in messages] for key, messages in (errors or {}).items()}
        job.variant = variant
        job.warning = variant.chat_template_warning if variant is not None else ""
        job.save(update_fields=["state", "finished_at", "stage", "errors", "variant", "warning"])
        return job


def hub_imports_mark_lost(*, now: datetime | None = None) -> int:
    """Beat: running imports whose worker went away (far past every deadline) become `lost`."""
    now = now or timezone.now()
    lost_after = timedelta(seconds=LOST_AFTER_DEADLINES * settings.HUB_REQUEST_DEADLINE_S + 60)
    reason = "The panel's worker stopped while it read the hub (killed or restarted): import again."
    return HubImport.objects.filter(state=OperationState.RUNNING, started_at__lt=now - lost_after).update(
        state=OperationState.LOST, finished_at=now, stage="ended", errors={"repo_id": [reason]}
    )

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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from controlpanel.roles import OPERATOR, ensure_role
from deployments.choices import ModelFormat
from deployments.models import ModelVariant

from .imports import _gguf_facts, _save_variant, _text_arg, _unique_name, _variant_text

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

# HubError.field -> the form field (and command option) it concerns.
FIELDS = {"repo_id": "repo_id", "revision": "revision", "file": "file", "token": "token_secret"}


def hub_token(ref: str) -> str | None:
    """The token a `HOST/NAME` reference names (the secret NAME of host HOST, which an admin
    marked as a hub token), or None for no reference. Anything else, an unknown host included,
    is refused in the one wording that tells nothing of what exists (ValidationError on
    token_secret)."""
    from hardware.models import Host

    from .secrets import hub_token_reveal

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
        stem = model.gguf_file.rsplit("/", 1)[-1][: -len(".gguf")]
        stem = stem.split("-00001-of-")[0]
        base = stem if base.lower().replace("-gguf", "") in stem.lower() or not base else f"{base}/{stem}"
    name = base[:200]
    if ModelVariant.objects.filter(name=name).exists():
        name = f"{name}@{model.revision[:7]}"[:200]
    return _unique_name(name)


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
    token_secret or name; nothing is stored then."""
    from deployments.importers.hf_config import HfConfigError, arch_from_hf_config
    from deployments.importers.hub import HubError, hub_read

    ensure_role(actor, OPERATOR)
    repo_id = _variant_text(repo_id, "repo_id")
    revision = _text_arg(revision, field="revision", max_len=200)
    gguf_file = _text_arg(gguf_file, field="file", max_len=300)
    family = _variant_text(family, "family")
    generation = _variant_text(generation, "generation")
    name = _variant_text(name, "name")
    if not repo_id:
        raise ValidationError({"repo_id": "Give a repository id, e.g. Qwen/Qwen3-32B-AWQ."})
    token = hub_token(token)
    try:
        model = hub_read(
            repo_id, revision=revision, gguf_file=gguf_file, token=token, deadline_s=settings.HUB_REQUEST_DEADLINE_S
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
    files = [f.to_dict() for f in model.needed_files()]
    where = f"{model.repo_id}@{model.revision}"
    with transaction.atomic():
        if model.gguf is not None:
            imported = model.gguf
            variant = ModelVariant(
                name=_name_for(model, name),
                repo_id=model.repo_id,
                revision=model.revision,
                gguf_file=model.gguf_file or "",
                hub_files=files,
                generation=generation,
                weights_bytes=imported.file_size or None,
                source=(
                    f"Read from the hub: {where}, GGUF header of {model.gguf_file} (HTTP ranges); "
                    f"weights: the file size the hub lists."
                )
                + _skipped_note(model),
                **_gguf_facts(imported, family=family),
            )
            return _save_variant(variant, via=f"hub {model.repo_id}", error_key="repo_id", actor=actor)
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
        variant = ModelVariant(
            name=_name_for(model, name),
            repo_id=model.repo_id,
            revision=model.revision,
            hub_files=files,
            family=family or (hf.arch.family or ""),
            generation=generation,
            format=ModelFormat.HF,
            quantization=(quant.method or hf.arch.torch_dtype or "")[:60],
            quant_method=quant.method or "",
            quant_bits=quant.bits,
            quant_group_size=quant.group_size,
            weights_bytes=model.index_total_size,
            arch=hf.arch.to_dict(),
            sampling_presets=presets,
            source=(
                f"Read from the hub: {where} (config.json"
                + (", generation_config.json" if presets else "")
                + f"); {weights_note}."
                + _skipped_note(model)
            ),
        )
        if hf.arch.params_total is None and model.safetensors_params:
            variant.arch = {**variant.arch, "params_total": model.safetensors_params}
        return _save_variant(variant, via=f"hub {model.repo_id}", error_key="repo_id", actor=actor)

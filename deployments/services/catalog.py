"""Load the starter catalog (GPU types and the seeds' model variants); idempotent. Say what a
catalog model is for (chat or completions: serving.purpose)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction

from controlpanel.roles import OPERATOR, ensure_role
from core.audit import audit_record, audited_save
from deployments.catalog_data import GPU_TYPES, MODEL_VARIANTS
from deployments.choices import ModelPurpose
from deployments.models import ModelVariant
from hardware.models import GpuType

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser


@transaction.atomic
def catalog_load(*, actor: AbstractUser | None = None) -> dict[str, int]:
    created = {"gpu_types": 0, "model_variants": 0}
    for data in GPU_TYPES:
        _, new = GpuType.objects.update_or_create(short_name=data["short_name"], defaults=data)
        created["gpu_types"] += int(new)
    for data in MODEL_VARIANTS:
        values = dict(data)
        variant = ModelVariant.objects.filter(name=values["name"]).first() or ModelVariant(name=values["name"])
        for key, value in values.items():
            setattr(variant, key, value)
        new = variant._state.adding
        variant.full_clean()
        variant.save()
        created["model_variants"] += int(new)
    if any(created.values()):
        audit_record(
            action="catalog.load",
            summary=f"catalog: {created['gpu_types']} GPU type(s), {created['model_variants']} model(s) added",
            data=created,
            actor=actor,
        )
    return created


@transaction.atomic
def model_variant_set_purpose(*, variant: ModelVariant, purpose: str, actor: AbstractUser | None) -> ModelVariant:
    """Record what `variant` is for: chat (the switch's gate tests a chat, and noise fails it) or
    completions (a base model served on purpose: the gate tests a completion). Its revisions launch
    with it from their next start. ValidationError for anything else; nothing changes then."""
    ensure_role(actor, OPERATOR)
    if purpose not in ModelPurpose.values:
        raise ValidationError({"purpose": f"A model is for one of: {', '.join(ModelPurpose.values)}."})
    variant = ModelVariant.objects.select_for_update().get(pk=variant.pk)
    before = variant.purpose
    if before == purpose:
        return variant
    variant.purpose = purpose
    audited_save(
        variant,
        action="model.purpose",
        summary=f"model {variant.name} is for {variant.get_purpose_display().lower()} (was {before})",
        data={"purpose": purpose, "was": before},
        actor=actor,
    )
    return variant

"""Load the starter catalog (GPU types and the seeds' model variants); idempotent."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import transaction

from core.audit import audit_record
from deployments.catalog_data import GPU_TYPES, MODEL_VARIANTS
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

"""The model catalog."""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest
from ninja import Router

from api.schemas import Error, ModelList, ModelOut
from api.serialize import model_dict
from controlpanel.roles import VIEWER
from deployments.models import ModelVariant
from deployments.selectors import model_list as catalog

from . import actor

router = Router(tags=["models"])


@router.get("", response=ModelList, summary="The model catalog")
def model_list(request: HttpRequest) -> dict[str, Any]:
    actor(request, VIEWER)
    items = [model_dict(m) for m in catalog()]
    return {"items": items, "count": len(items)}


@router.get("{name}/", response={200: ModelOut, 404: Error}, summary="One model by name")
def model_get(request: HttpRequest, name: str) -> dict[str, Any]:
    actor(request, VIEWER)
    model = ModelVariant.objects.filter(name=name).first()
    if model is None:
        raise Http404(f"No model named {name[:80]!r}.")
    return model_dict(model)

"""The automation API (`/api/v1/`, OpenAPI at `/api/v1/openapi.json`), built with django-ninja,
which derives the schema from the endpoints' type hints.

Every request carries a personal token (`Authorization: Bearer cpat_…`) and acts with its user's
role; the endpoints call the same services as the pages, with the same checks and audit events.
No token or a bad one: 401. A role too low: 403. Bad input: 400 with field errors. A refusal
the request cannot fix as sent (host busy, planner errors): 409. Unknown objects: 404."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ObjectDoesNotExist, PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI, Swagger
from ninja.errors import AuthenticationError
from ninja.errors import ValidationError as SchemaError
from ninja.security import HttpBearer

from changes.models import ChangeRequest
from deployments.services.operations import HostBusyError
from deployments.services.switch import PlanRefused
from hardware.review import ChangeRequested
from rollouts.services import RolloutOverlap

from .endpoints import (
    benchmarks,
    changes,
    front_door,
    hosts,
    models,
    operations,
    revisions,
    rollouts,
    schedules,
    tuning,
)
from .serialize import change_dict
from .tokens import token_authenticate


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        user = token_authenticate(token)
        if user is not None:
            request.user = user  # the audit context and the services see who acts
        return user


api = NinjaAPI(
    title="LLM control panel API",
    version="1",
    description=(
        "Hosts, models, revisions, switches, operations and benchmarks. Authenticate with a personal token "
        "(`Authorization: Bearer cpat_...`, created on the Tokens page or with `manage.py token create`); "
        "it acts with its user's role (viewer reads, operator switches and benchmarks, admin overrides)."
    ),
    auth=TokenAuth(),
    urls_namespace="api",
    docs_url="/docs",
    # Swagger UI from the panel's own static files (`ninja` is an installed app), under the pages'
    # Content-Security-Policy; no badge fetched from swagger.io's validator.
    docs=Swagger(settings={"validatorUrl": None}),
)


def _field_errors(exc: ValidationError) -> dict[str, list[str]]:
    if hasattr(exc, "error_dict"):
        return {field: [str(m) for e in errors for m in e.messages] for field, errors in exc.error_dict.items()}
    return {"__all__": [str(m) for m in exc.messages]}


@api.exception_handler(AuthenticationError)
def _unauthenticated(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    response = api.create_response(
        request, {"detail": "A valid API token is required (Authorization: Bearer …)."}, status=401
    )
    response["WWW-Authenticate"] = "Bearer"
    return response


@api.exception_handler(PermissionDenied)
def _forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "Your role does not allow this."}, status=403)


@api.exception_handler(PlanRefused)
def _plan_refused(request: HttpRequest, exc: PlanRefused) -> HttpResponse:
    findings = [
        {"severity": f.severity, "code": f.code, "message": f.message}
        for f in getattr(exc.report, "findings", ())
        if f.severity == "error"
    ]
    body = {"detail": " ".join(exc.messages), "findings": findings}
    return api.create_response(request, body, status=409)


@api.exception_handler(HostBusyError)
@api.exception_handler(RolloutOverlap)
def _conflict(request: HttpRequest, exc: HostBusyError | RolloutOverlap) -> HttpResponse:
    """The host is busy with another operation, or its group with another rollout: 409."""
    return api.create_response(request, {"detail": " ".join(exc.messages)}, status=409)


@api.exception_handler(ChangeRequested)
def _change_requested(request: HttpRequest, exc: ChangeRequested) -> HttpResponse:
    """A protected host: the change waits for a review (202, with the request to follow)."""
    change = ChangeRequest.objects.select_related("host", "author").get(pk=exc.change.pk)
    body = {"detail": " ".join(exc.messages), "change_request": change_dict(change)}
    return api.create_response(request, body, status=202)


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = _field_errors(exc)
    detail = "; ".join(f"{k}: {' '.join(v)}" if k != "__all__" else " ".join(v) for k, v in errors.items())
    return api.create_response(request, {"detail": detail, "errors": errors}, status=400)


@api.exception_handler(SchemaError)
def _bad_body(request: HttpRequest, exc: SchemaError) -> HttpResponse:
    errors: dict[str, list[str]] = {}
    for e in exc.errors:
        loc = [str(p) for p in e.get("loc", ()) if p not in ("body", "payload", "query", "path")]
        errors.setdefault(".".join(loc) or "__all__", []).append(str(e.get("msg", "invalid")))
    detail = "; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items())
    return api.create_response(request, {"detail": detail, "errors": errors}, status=400)


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Exception) -> HttpResponse:
    return api.create_response(request, {"detail": str(exc) or "Not found."}, status=404)


@api.exception_handler(ObjectDoesNotExist)
def _no_object(request: HttpRequest, exc: Exception) -> HttpResponse:
    return api.create_response(request, {"detail": "Not found."}, status=404)


def _register() -> None:
    routers = {
        "/hosts/": (
            hosts.router,
            revisions.router,
            benchmarks.host_router,
            front_door.hosts,
            rollouts.hosts,
            tuning.hosts,
        ),
        "/benchmarks/": (benchmarks.router,),
        "/models/": (models.router,),
        "/operations/": (operations.router,),
        "/keys/": (front_door.keys,),
        "/usage/": (front_door.usage,),
        "/changes/": (changes.router,),
        "/schedules/": (schedules.router,),
        "/rollouts/": (rollouts.router,),
        "/tuning/": (tuning.router,),
    }
    for prefix, group in routers.items():
        for router in group:
            api.add_router(prefix, router)


_register()

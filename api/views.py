"""The Tokens page: a user's personal API tokens (create: shown once; revoke). Admins see all."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from controlpanel.params import int_param
from controlpanel.roles import ADMIN, VIEWER, has_role, role_required

from .models import ApiToken
from .tokens import token_create, token_revoke

app_name = "api_tokens"


def _page(request: HttpRequest, *, secret: str = "", error: str = "", name: str = "") -> HttpResponse:
    tokens = ApiToken.objects.select_related("user").order_by("-created_at")
    is_admin = has_role(request.user, ADMIN)
    if not is_admin:
        tokens = tokens.filter(user=request.user)
    return render(
        request,
        "api/tokens.html",
        {"tokens": tokens[:200], "secret": secret, "error": error, "name": name, "is_admin": is_admin},
        status=400 if error else 200,
    )


@require_GET
@role_required(VIEWER)
def token_list(request: HttpRequest) -> HttpResponse:
    return _page(request)


@require_POST
@role_required(VIEWER)
def token_new(request: HttpRequest) -> HttpResponse:
    name = request.POST.get("name", "")[:200]
    try:
        new = token_create(user=request.user, name=name, actor=request.user)
    except ValidationError as exc:
        return _page(request, error=" ".join(exc.messages), name=name)
    # Shown in this response only: the page after a reload no longer has it.
    response = _page(request, secret=new.secret)
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@role_required(VIEWER)
def token_delete(request: HttpRequest) -> HttpResponse:
    pk = int_param(request.POST, "token")
    token = ApiToken.objects.filter(pk=pk).first() if pk else None
    if token is None or (token.user_id != request.user.pk and not has_role(request.user, ADMIN)):
        raise Http404("No such token.")
    token_revoke(token=token, actor=request.user)
    return redirect("api_tokens:list")


urlpatterns = [
    path("", token_list, name="list"),
    path("new/", token_new, name="new"),
    path("revoke/", token_delete, name="revoke"),
]

"""People pages for admins: list, add, change role (or hand an SSO person's role back to their
groups), deactivate/reactivate, reset a password, unlock after a login lockout. Every change goes
through people.services (or .sso)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import include, path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import ADMIN, role_required
from core.http import by_method, form_save

from . import services, sso
from .forms import PersonCreateForm, RoleForm


def _target(username: str) -> Any:
    try:
        return get_user_model().objects.get(username=username)
    except get_user_model().DoesNotExist:
        raise Http404("No such person.") from None


@require_GET
@role_required(ADMIN)
def people_list(request: HttpRequest) -> HttpResponse:
    people = services.people_list(actor=request.user)
    return render(
        request,
        "people/list.html",
        {"people": people, "locked_count": sum(p.locked for p in people), "form": PersonCreateForm()},
    )


def _password_page(request: HttpRequest, new: services.NewPassword, *, created: bool) -> HttpResponse:
    response = render(request, "people/password_once.html", {"new": new, "created": created})
    # Shown once: never cached by the browser or a proxy.
    response["Cache-Control"] = "no-store"
    return response


@require_GET
@role_required(ADMIN)
def person_add_page(request: HttpRequest) -> HttpResponse:
    return render(request, "people/add.html", {"form": PersonCreateForm()})


@never_cache
@require_POST
@role_required(ADMIN)
def person_add_submit(request: HttpRequest) -> HttpResponse:
    form = PersonCreateForm(request.POST)
    new = form_save(
        form,
        lambda data: services.person_create(
            username=data["username"], email=data["email"], role=data["role"], actor=request.user
        ),
    )
    if new is None:
        return render(request, "people/add.html", {"form": form}, status=400)
    return _password_page(request, new, created=True)


person_add = by_method(get=person_add_page, post=person_add_submit)


@require_GET
@role_required(ADMIN)
def person_detail(request: HttpRequest, username: str) -> HttpResponse:
    _target(username)
    person = services.person_get(username=username, actor=request.user)
    return render(
        request,
        "people/detail.html",
        {
            "person": person,
            "role_form": RoleForm(initial={"role": person.role}),
            "is_self": person.user.pk == request.user.pk,
        },
    )


def _done(request: HttpRequest, username: str, text: str) -> HttpResponse:
    messages.success(request, text)
    return redirect("people:detail", username=username)


def _refused(request: HttpRequest, username: str, exc: ValidationError) -> HttpResponse:
    for text in exc.messages:
        messages.error(request, text)
    return redirect("people:detail", username=username)


def _refusals_said(view: Callable[[HttpRequest, str], HttpResponse]) -> Callable[[HttpRequest, str], HttpResponse]:
    """A change the services refuse (ValidationError) is said on the person's page."""

    @wraps(view)
    def wrapped(request: HttpRequest, username: str) -> HttpResponse:
        try:
            return view(request, username)
        except ValidationError as exc:
            return _refused(request, username, exc)

    return wrapped


@require_POST
@role_required(ADMIN)
@_refusals_said
def person_role(request: HttpRequest, username: str) -> HttpResponse:
    user = _target(username)
    form = RoleForm(request.POST)
    if not form.is_valid():
        raise ValidationError("Choose a role: viewer, operator or admin.")
    services.person_set_role(user=user, role=form.cleaned_data["role"], actor=request.user)
    return _done(request, username, f"{username} is now {form.cleaned_data['role']}.")


@require_POST
@role_required(ADMIN)
@_refusals_said
def person_active(request: HttpRequest, username: str) -> HttpResponse:
    user = _target(username)
    wanted = request.POST.get("active")
    if wanted not in ("0", "1"):
        raise ValidationError("Say whether to activate (1) or deactivate (0).")
    services.person_set_active(user=user, active=wanted == "1", actor=request.user)
    if wanted == "1":
        return _done(request, username, f"{username} can sign in again.")
    return _done(request, username, f"{username} is deactivated: signed out everywhere and cannot sign in.")


@never_cache
@require_POST
@role_required(ADMIN)
@_refusals_said
def person_password(request: HttpRequest, username: str) -> HttpResponse:
    new = services.person_reset_password(user=_target(username), actor=request.user)
    return _password_page(request, new, created=False)


@require_POST
@role_required(ADMIN)
@_refusals_said
def person_sso_groups(request: HttpRequest, username: str) -> HttpResponse:
    role = sso.person_follow_groups(user=_target(username), actor=request.user)
    return _done(request, username, f"{username}'s role follows their groups again: {role or 'no role'} for now.")


@require_POST
@role_required(ADMIN)
def person_unlock(request: HttpRequest, username: str) -> HttpResponse:
    user = _target(username)
    count = services.person_unlock(user=user, actor=request.user)
    if count:
        return _done(request, username, f"{username} is unlocked and can try to sign in again.")
    return _done(request, username, f"{username} had no failed sign-ins to clear.")


app_name = "people"
urlpatterns = [
    path("", people_list, name="list"),
    path("add/", person_add, name="add"),
    # One person's page and the changes posted from it, under one prefix.
    path(
        "user/<str:username>/",
        include(
            [
                path("", person_detail, name="detail"),
                path("role/", person_role, name="role"),
                path("active/", person_active, name="active"),
                path("password/", person_password, name="password"),
                path("unlock/", person_unlock, name="unlock"),
                path("sso-groups/", person_sso_groups, name="sso_groups"),
            ]
        ),
    ),
]

"""People pages for admins: list, add, change role, deactivate/reactivate, reset a password,
unlock after a login lockout. Every change goes through controlpanel.people.services."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import ADMIN, role_required
from core.http import by_method

from . import services
from .forms import PersonCreateForm, RoleForm


def _apply_error(form: Any, exc: ValidationError) -> None:
    if hasattr(exc, "error_dict"):
        for key, errors in exc.message_dict.items():
            form.add_error(key if key in form.fields else None, errors)
    else:
        form.add_error(None, exc.messages)


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
    if form.is_valid():
        try:
            new = services.person_create(
                username=form.cleaned_data["username"],
                email=form.cleaned_data["email"],
                role=form.cleaned_data["role"],
                actor=request.user,
            )
        except ValidationError as exc:
            _apply_error(form, exc)
        else:
            return _password_page(request, new, created=True)
    return render(request, "people/add.html", {"form": form}, status=400)


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


@require_POST
@role_required(ADMIN)
def person_role(request: HttpRequest, username: str) -> HttpResponse:
    user = _target(username)
    form = RoleForm(request.POST)
    if not form.is_valid():
        return _refused(request, username, ValidationError("Choose a role: viewer, operator or admin."))
    try:
        services.person_set_role(user=user, role=form.cleaned_data["role"], actor=request.user)
    except ValidationError as exc:
        return _refused(request, username, exc)
    return _done(request, username, f"{username} is now {form.cleaned_data['role']}.")


@require_POST
@role_required(ADMIN)
def person_active(request: HttpRequest, username: str) -> HttpResponse:
    user = _target(username)
    wanted = request.POST.get("active")
    if wanted not in ("0", "1"):
        return _refused(request, username, ValidationError("Say whether to activate (1) or deactivate (0)."))
    try:
        services.person_set_active(user=user, active=wanted == "1", actor=request.user)
    except ValidationError as exc:
        return _refused(request, username, exc)
    if wanted == "1":
        return _done(request, username, f"{username} can sign in again.")
    return _done(request, username, f"{username} is deactivated: signed out everywhere and cannot sign in.")


@never_cache
@require_POST
@role_required(ADMIN)
def person_password(request: HttpRequest, username: str) -> HttpResponse:
    user = _target(username)
    new = services.person_reset_password(user=user, actor=request.user)
    return _password_page(request, new, created=False)


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
    path("user/<str:username>/", person_detail, name="detail"),
    path("user/<str:username>/role/", person_role, name="role"),
    path("user/<str:username>/active/", person_active, name="active"),
    path("user/<str:username>/password/", person_password, name="password"),
    path("user/<str:username>/unlock/", person_unlock, name="unlock"),
]

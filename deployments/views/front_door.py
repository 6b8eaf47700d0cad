"""The front door in the browser: a host's live front-door section (loaded set, aliases) with its
forms, the inference keys and the door mode (admins) and usage per key, revision and day."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import ADMIN, OPERATOR, VIEWER, has_role, role_required
from core.http import form_save
from deployments import presenters
from deployments.choices import DoorMode, ServeMode
from deployments.forms import AliasForm, DoorModeForm, InferenceKeyForm, InferenceKeyModelsForm, ServeModeForm
from deployments.models import InferenceKey
from deployments.selectors import revision_numbered
from deployments.services.aliases import alias_delete, alias_set
from deployments.services.front_door import front_door_live
from deployments.services.inference_keys import door_mode, door_mode_set, key_create, key_models_set, key_revoke
from deployments.services.serving_set import NOT_SERVED, serving_mode_set
from deployments.services.usage import usage_grand_total, usage_totals
from hardware.models import Host
from hardware.review import ChangeRequested
from schedules.choices import ChangeKind
from schedules.forms import WhenForm
from schedules.services import change_schedule

USAGE_DAYS = (1, 7, 31)


def front_door_context(request: HttpRequest, host: Host) -> dict[str, object]:
    """What `hardware/_front_door.html` shows: the host page loads it, then polls it every 5 s."""
    return {
        "host": host,
        "fd": front_door_live(host),
        "can_operate": has_role(request.user, OPERATOR),
        "modes": [*ServeMode.choices, (NOT_SERVED, "Not served")],
    }


@require_GET
@role_required(VIEWER)
def host_front_door(request: HttpRequest, host: str) -> HttpResponse:
    found = get_object_or_404(Host, name=host)
    return render(request, "hardware/_front_door.html", front_door_context(request, found))


def _cleaned(form: ServeModeForm | AliasForm | InferenceKeyModelsForm | DoorModeForm | WhenForm) -> dict:
    """The form's values; its errors as a ValidationError, shown as the services' refusals are."""
    if not form.is_valid():
        raise ValidationError(form.errors.as_data())
    return form.cleaned_data


def _change(request: HttpRequest, change: Callable[[], str]) -> None:
    """Run one change; its message, or the refusal, shows on the next page."""
    try:
        done = change()
    except ChangeRequested as exc:  # a protected host: the change waits for a review
        messages.info(request, " ".join(exc.messages))
    except ValidationError as exc:
        presenters.flash_refusal(request, exc)
    else:
        messages.success(request, done)


def _host_change(request: HttpRequest, host: Host, change: Callable[[], str]) -> HttpResponse:
    """Run one change of the host's front door; back to the host page."""
    _change(request, change)
    return redirect("hardware:host_detail", name=host.name)


def _host_form(
    request: HttpRequest, host: str, form_class: type[ServeModeForm | AliasForm], change: Callable[[Host, dict], str]
) -> HttpResponse:
    found = get_object_or_404(Host, name=host)
    form = form_class(request.POST)
    return _host_change(request, found, lambda: change(found, _cleaned(form)))


@require_POST
@role_required(OPERATOR)
def host_serve_mode(request: HttpRequest, host: str) -> HttpResponse:
    def change(found: Host, data: dict) -> str:
        revision = revision_numbered(found, data["revision"])
        serving_mode_set(revision=revision, mode=data["mode"], idle_ttl_s=data["idle_ttl_s"], actor=request.user)
        return f"r{revision.number}: {data['mode']}."

    return _host_form(request, host, ServeModeForm, change)


@require_POST
@role_required(OPERATOR)
def host_alias_set(request: HttpRequest, host: str) -> HttpResponse:
    when = WhenForm(request.POST)

    def change(found: Host, data: dict) -> str:
        revision = revision_numbered(found, data["revision"])
        _cleaned(when)
        if later := when.later():  # beat runs the same alias_set when it is due
            params = {"name": data["name"], "revision": revision.number}
            scheduled = change_schedule(kind=ChangeKind.ALIAS, host=found, params=params, **later, actor=request.user)
            return f"{data['name']} moves to r{revision.number} at {scheduled.run_at:%Y-%m-%d %H:%M} UTC."
        alias_set(host=found, name=data["name"], revision=revision, actor=request.user)
        return f"{data['name']} now points at r{data['revision']}."

    return _host_form(request, host, AliasForm, change)


@require_POST
@role_required(OPERATOR)
def host_alias_delete(request: HttpRequest, host: str, alias: str) -> HttpResponse:
    found = get_object_or_404(Host, name=host)

    def change() -> str:
        alias_delete(host=found, name=alias, actor=request.user)
        return f"Deleted the alias {alias}."

    return _host_change(request, found, change)


@never_cache
@role_required(ADMIN)
def key_list(request: HttpRequest) -> HttpResponse:
    """The inference keys; a new key's secret is shown on the answer to its POST, once."""
    if request.method not in ("GET", "POST"):
        return HttpResponseNotAllowed(["GET", "POST"])
    form = InferenceKeyForm(request.POST if request.method == "POST" else None)
    created = None
    if form.is_bound:
        made = form_save(
            form, lambda data: key_create(name=data["name"], models=data["models"], actor=request.user), fallback="name"
        )
        if made is not None:
            key, secret = made
            created = {"key": key, "secret": secret}
            form = InferenceKeyForm()
    keys = InferenceKey.objects.select_related("created_by").order_by("revoked_at", "name")
    context = {
        "keys": keys, "form": form, "created": created, "router_url": settings.ROUTER_URL,
        "door_mode": door_mode(), "modes": DoorMode.choices,
    }  # fmt: skip
    return render(request, "deployments/keys.html", context)


@require_POST
@role_required(ADMIN)
def key_revoke_view(request: HttpRequest, name: str) -> HttpResponse:
    key = get_object_or_404(InferenceKey, name=name)

    def change() -> str:
        key_revoke(key=key, actor=request.user)
        done = f"Revoked {name}: every front door refuses it from its next poll."
        if not InferenceKey.objects.filter(revoked_at__isnull=True).exists() and door_mode() == DoorMode.KEYS_REQUIRED:
            done += " No live key is left: every request is refused until a key is made (keys required)."
        return done

    _change(request, change)
    return redirect("deployments:key_list")


@require_POST
@role_required(ADMIN)
def key_mode_view(request: HttpRequest) -> HttpResponse:
    """Open the lab's doors to requests with no key, or require keys again."""

    form = DoorModeForm(request.POST)

    def change() -> str:
        mode = door_mode_set(mode=_cleaned(form)["mode"], actor=request.user)
        return f"Door mode: {mode.label.lower()}, on every front door from its next poll and on the lab router."

    _change(request, change)
    return redirect("deployments:key_list")


@require_POST
@role_required(ADMIN)
def key_models_view(request: HttpRequest, name: str) -> HttpResponse:
    key = get_object_or_404(InferenceKey, name=name)
    form = InferenceKeyModelsForm(request.POST)

    def change() -> str:
        key_models_set(key=key, models=_cleaned(form)["models"], actor=request.user)
        return f"{name}'s models changed."

    _change(request, change)
    return redirect("deployments:key_list")


@require_GET
@role_required(VIEWER)
def usage(request: HttpRequest) -> HttpResponse:
    try:
        days = int(request.GET.get("days") or 7)
    except ValueError:
        days = 7
    days = days if days in USAGE_DAYS else 7
    context = {
        "days": days,
        "choices": USAGE_DAYS,
        "total": usage_grand_total(days=days),
        "by_key": usage_totals(by=("key",), days=days),
        "by_revision": usage_totals(by=("host__name", "model", "revision__number"), days=days),
        "by_day": usage_totals(by=("day", "key", "host__name", "model"), days=days),
    }
    return render(request, "deployments/usage.html", context)


urlpatterns = [
    path("hosts/<slug:host>/front-door/", host_front_door, name="host_front_door"),
    path("hosts/<slug:host>/front-door/mode/", host_serve_mode, name="host_serve_mode"),
    path("hosts/<slug:host>/front-door/aliases/", host_alias_set, name="host_alias_set"),
    path("hosts/<slug:host>/front-door/aliases/<slug:alias>/delete/", host_alias_delete, name="host_alias_delete"),
    path("keys/", key_list, name="key_list"),
    path("keys/mode/", key_mode_view, name="key_mode"),
    path("keys/<slug:name>/revoke/", key_revoke_view, name="key_revoke"),
    path("keys/<slug:name>/models/", key_models_view, name="key_models"),
    path("usage/", usage, name="usage"),
]

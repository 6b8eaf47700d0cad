"""Hosts: a host's page (GPUs, telemetry, what fits, history, actions) and the small live
widgets it polls. (The dashboard, every host's card, is `dashboard.views`.)

They put hosts beside their revisions and operations, so they live here, above `hardware`;
their URLs keep the `hardware:` names (`deployments.views.host_urls`) and their templates stay in
`templates/hardware/`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import messages
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timesince
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from controlpanel.roles import ADMIN, OPERATOR, VIEWER, has_role, role_required
from core.http import cached_render, polled
from deployments import plots, presenters
from deployments.choices import Engine
from deployments.models import Operation
from deployments.runtime_bridge import runs_on_this_machine
from deployments.selectors import hosts as selectors
from deployments.selectors import memory as memory_selectors
from deployments.services.inference_keys import door_mode
from deployments.services.installs import (
    install_carried,
    install_list,
    install_offers,
    install_request,
    install_reread,
)
from deployments.services.serving import start_request, stop_request
from deployments.services.switch import probe_request
from deployments.views.benchmarks import safe_headline
from deployments.views.host_events import recent_events
from deployments.views.operations import operation_or_404
from hardware import selectors as hardware_selectors
from hardware.models import Host

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

TELEMETRY_HOURS = 1.0
TELEMETRY_CACHE_S = 600
WHAT_FITS_CACHE_S = 3600
HISTORY_ON_PAGE = 10


def _is_partial(request: HttpRequest) -> bool:
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.boosted


def _card_or_404(name: str) -> selectors.HostCard:
    """The dashboard card of the host named `name` (Http404 when there is none)."""
    cards = selectors.host_cards(hosts=selectors.host_list().filter(name=name))
    if not cards:
        raise Http404("No such host.")
    return cards[0]


# --- live widgets --------------------------------------------------------------------------------


@require_GET
@role_required(VIEWER)
def host_card(request: HttpRequest, name: str) -> HttpResponse:
    """The host's card alone: its page's "Now" refreshes it."""
    return render(request, "dashboard/_host_card.html", {"card": _card_or_404(name), "single": True})


@require_GET
@role_required(VIEWER)
def operation_widget(request: HttpRequest, pk: str) -> HttpResponse:
    """One operation's progress bar; answers 286 (stop polling) once the operation has ended."""
    op = operation_or_404(pk)
    return polled(request, "hardware/_operation_widget.html", {"op": op, "host": op.host}, going=op.is_active)


# --- host page -------------------------------------------------------------------------------------


def _telemetry(host: Host) -> dict[str, Any]:
    """The telemetry section's context: the host's CPU and memory now and over the window, its GPU
    charts and the engine's own metrics (no chart where nothing reported). Drawn once per set of
    samples in the window and kept under its stamp: the page, its 30 s refresh and every other
    viewer read them from there until the agent's next report."""
    now = timezone.now()
    stamp = hardware_selectors.telemetry_stamp(host=host, hours=TELEMETRY_HOURS, now=now)
    key = f"telemetry:{host.pk}:{TELEMETRY_HOURS}:" + "-".join(map(str, stamp))
    context: dict[str, Any] | None = cache.get(key)
    if context is None:
        usage = hardware_selectors.usage_series(host=host, hours=TELEMETRY_HOURS, now=now)
        charts = plots.usage_charts(usage) if usage else {}
        series = hardware_selectors.gpu_series(host=host, hours=TELEMETRY_HOURS, now=now)
        if series:
            charts.update(plots.telemetry_charts(series))
        engine = hardware_selectors.engine_series(host=host, hours=TELEMETRY_HOURS, now=now)
        if engine:
            charts.update(plots.engine_charts(engine))
        context = {
            "telemetry": charts,
            "telemetry_hours": TELEMETRY_HOURS,
            "gpu_telemetry": bool(series),
            "usage_now": usage[-1] if usage else None,
        }
        cache.set(key, context, TELEMETRY_CACHE_S)
    return context


class InstallForm(forms.Form):
    """Install an engine on a host: the engine, an exact version (the page offers a default) and,
    admin only, a folder on the host to install from (a wheelhouse for a host without the
    Internet, or a llama.cpp checkout to build) inside the folders the host allows."""

    engine = forms.ChoiceField(choices=Engine.choices)
    version = forms.CharField(max_length=40, required=False)
    wheelhouse = forms.CharField(
        max_length=500,
        required=False,
        help_text="Admin only: an absolute folder of wheels on the host (one it allows), for a host without the "
        "Internet.",
    )
    source_dir = forms.CharField(
        max_length=500,
        required=False,
        help_text="Admin only, llama.cpp: a checkout on the host (in a folder it allows) to build.",
    )


class ReadAgainForm(forms.Form):
    """Read a recorded install's venv again (install_reread): which engine, which recorded version."""

    engine = forms.ChoiceField(choices=Engine.choices)
    version = forms.CharField(max_length=100)


def _offline_reason(host: Host) -> str:
    """Why the host's actions are not offered, or "" when its agent is online."""
    if host.is_online:
        return ""
    if host.last_heartbeat is None:
        return (
            f"{host.name} has never reported: start its agent (manage.py agent) to probe, install, benchmark or switch."
        )
    return (
        f"{host.name} is offline: its agent last reported {timesince(host.last_heartbeat)} ago. Probe, install, "
        f"benchmark, stop and switch need its agent running; they come back when it reports again."
    )


def _host_context(host: Host, card: selectors.HostCard) -> dict[str, Any]:
    gpus = [g.gpu for g in card.gpus]
    runs = selectors.host_benchmark_runs(host=host)
    return {
        "offline_reason": _offline_reason(host),
        "installs": install_list(host=host),
        "carried": install_carried(host=host),
        "offers": install_offers(host=host),
        "host": host,
        "card": card,
        **_telemetry(host),
        # Planned and rendered once per GPU set and catalog: a few hundred plans were most of the page's time.
        "what_fits_html": cached_render(
            "hardware/_what_fits.html",
            selectors.what_fits_digest(gpus=gpus),
            lambda: {"what_fits": selectors.host_what_fits(gpus=gpus), "card": card},
            seconds=WHAT_FITS_CACHE_S,
        ),
        "revisions": list(
            host.revisions.select_related("model_variant", "author").order_by("-number")[:HISTORY_ON_PAGE]
        ),
        "operations": selectors.host_recent_operations(host=host),
        "outside": memory_selectors.host_outside_processes(host),
        "planner_error": memory_selectors.host_planner_error(host),
        "benchmarks": [(r, safe_headline(r.results)) for r in runs],
        "door_mode": door_mode(),
        "events": recent_events(host),
    }


@require_GET
@role_required(VIEWER)
def host_detail(request: HttpRequest, name: str) -> HttpResponse:
    card = _card_or_404(name)
    context = _host_context(card.host, card)
    if has_role(request.user, ADMIN) and not card.host.is_demo:  # the agent token's state, for admins only
        context["credential"] = (
            card.host.credentials.filter(revoked_at__isnull=True).select_related("created_by").first()
        )
        context["reported_address"] = hardware_selectors.host_reported_address(card.host)
        context["panels_own_machine"] = runs_on_this_machine(card.host)  # CONTROLPANEL_LAN_ADDRESS sets its address
    return render(request, "hardware/host_detail.html", context)


@require_GET
@role_required(VIEWER)
def host_telemetry(request: HttpRequest, name: str) -> HttpResponse:
    """The telemetry charts alone (the host page refreshes them)."""
    host = get_object_or_404(Host, name=name)
    context = {"host": host, **_telemetry(host)}
    return render(request, "hardware/_host_telemetry.html", context)


def _after_request(request: HttpRequest, host: Host, action: Callable[..., Operation], what: str) -> HttpResponse:
    try:
        op = action(host=host, actor=request.user)
    except ValidationError as exc:
        presenters.flash_refusal(request, exc, what=what)
        url = reverse("hardware:host_detail", args=[host.name])
    else:
        url = reverse("deployments:operation_detail", args=[op.pk])
    return HttpResponseClientRedirect(url) if _is_partial(request) else redirect(url)


# The host page's buttons: the service that queues each, and what a refusal says it could not do.
# A start serves the host's active revision again, and after restarts from then on.
HOST_ACTIONS: dict[str, tuple[Callable[..., Operation], str]] = {
    "probe": (probe_request, "probe"),
    "stop": (stop_request, "stop the engine"),
    "start": (start_request, "start the engine"),
}


@require_POST
@role_required(OPERATOR)
def host_action(request: HttpRequest, name: str, action: str) -> HttpResponse:
    """Queue one of `HOST_ACTIONS` on the host and follow its operation."""
    service, what = HOST_ACTIONS[action]
    return _after_request(request, get_object_or_404(Host, name=name), service, what)


def _queued_from_form(
    request: HttpRequest,
    name: str,
    form_class: type[forms.Form],
    queue: Callable[[Host, dict[str, Any], AbstractUser | None], Operation],
    what: tuple[str, str],
) -> HttpResponse:
    """The host's form posted: each error said on the host's page ("Could not <what[0]>: field:
    error"), else `queue`'s operation followed (_after_request; a refusal says it could not
    <what[1]>, formatted with the form's values)."""
    host = get_object_or_404(Host, name=name)
    form = form_class(request.POST)
    if not form.is_valid():
        for field, errors in form.errors.items():
            for error in errors:
                messages.error(request, f"Could not {what[0]}: {field}: {error}")
        url = reverse("hardware:host_detail", args=[host.name])
        return HttpResponseClientRedirect(url) if _is_partial(request) else redirect(url)
    values = form.cleaned_data
    return _after_request(request, host, lambda *, host, actor: queue(host, values, actor), what[1].format(**values))


def _install(host: Host, values: dict[str, Any], actor: AbstractUser | None) -> Operation:
    return install_request(
        host=host,
        engine=values["engine"],
        version=values["version"].strip(),
        wheelhouse=values["wheelhouse"].strip() or None,
        source_dir=values["source_dir"].strip() or None,
        actor=actor,
    )


def _read_again(host: Host, values: dict[str, Any], actor: AbstractUser | None) -> Operation:
    return install_reread(host=host, engine=values["engine"], version=values["version"], actor=actor)


@require_POST
@role_required(OPERATOR)
def host_install(request: HttpRequest, name: str) -> HttpResponse:
    """Queue an engine install on the host; its progress and log are on the operation's page."""
    return _queued_from_form(request, name, InstallForm, _install, ("install", "install {engine}"))


@require_POST
@role_required(OPERATOR)
def host_install_read_again(request: HttpRequest, name: str) -> HttpResponse:
    """Queue a new reading of a recorded install's venv (after a `pip install` into it)."""
    return _queued_from_form(
        request, name, ReadAgainForm, _read_again, ("read the install again", "read {engine} {version} again")
    )

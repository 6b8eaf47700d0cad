"""Rollout pages: the list, the form that starts one (now, at a time or in the canary's next
maintenance window; over a host that requires review it opens a change request), each rollout's
live page (its hosts polled while it is open) with pause, resume and cancel; and the host page's
tags form."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import OPERATOR, VIEWER, role_required
from core.http import apply_error, by_method, polled
from deployments.presenters import flash_refusal
from deployments.services.gates import gate_params
from hardware.models import Host, HostTag
from hardware.review import ChangeRequested
from hardware.services import host_tags_set
from schedules.choices import ChangeKind
from schedules.forms import WhenForm
from schedules.services import change_schedule

from . import selectors, services
from .forms import HostTagsForm, RolloutForm
from .models import Rollout


def _rollout_or_404(pk: int) -> Rollout:
    try:
        return selectors.rollout_get(pk=pk)
    except Rollout.DoesNotExist:
        raise Http404("No such rollout.") from None


@require_GET
@role_required(VIEWER)
def rollout_list(request: HttpRequest) -> HttpResponse:
    return render(request, "rollouts/list.html", {"rollouts": selectors.rollout_list()})


def _new_context(form: RolloutForm, when: WhenForm | None = None) -> dict[str, Any]:
    groups = sorted(set(HostTag.objects.values_list("name", flat=True)))
    return {"form": form, "groups": groups, "when": when or WhenForm()}


@require_GET
@role_required(VIEWER)
def rollout_new_form(request: HttpRequest) -> HttpResponse:
    return render(request, "rollouts/new.html", _new_context(RolloutForm(initial={"group": request.GET.get("group")})))


@require_POST
@role_required(OPERATOR)
def rollout_new_start(request: HttpRequest) -> HttpResponse:
    form, when = RolloutForm(request.POST), WhenForm(request.POST)
    if form.is_valid() and when.is_valid():
        data = form.cleaned_data
        params = {
            "group": data["group"],
            "kind": data["kind"],
            "change": form.change(),
            "batch_size": data["batch_size"],
            "canary": data["canary"],
        }
        try:
            if later := when.later():  # beat starts the same rollout when it is due
                kept = params | gate_params(data["gate"])
                scheduled = change_schedule(
                    kind=ChangeKind.ROLLOUT, host=None, params=kept, **later, actor=request.user
                )
                messages.success(
                    request, f"Rollout of {data['group']} scheduled for {scheduled.run_at:%Y-%m-%d %H:%M} UTC."
                )
                return redirect(reverse("schedules:list") + f"?host={scheduled.host.name}")
            rollout = services.rollout_start(**params, gate=data["gate"], actor=request.user)
        except ChangeRequested as exc:  # a host of the group requires review: the rollout waits for it
            messages.info(request, " ".join(exc.messages))
            return redirect(exc.change.get_absolute_url())
        except ValidationError as exc:
            apply_error(form, exc, fallback="knobs")
        else:
            return redirect("rollouts:detail", pk=rollout.pk)
    return render(request, "rollouts/new.html", _new_context(form, when), status=400)


rollout_new = by_method(get=rollout_new_form, post=rollout_new_start)


def _detail_context(rollout: Rollout) -> dict[str, Any]:
    return {
        "rollout": rollout,
        "waves": selectors.rollout_waves(rollout=rollout),
        "gate": selectors.rollout_canary_gate(rollout=rollout),
    }


@require_GET
@role_required(VIEWER)
def rollout_detail(request: HttpRequest, pk: int) -> HttpResponse:
    return render(request, "rollouts/detail.html", _detail_context(_rollout_or_404(pk)))


@require_GET
@role_required(VIEWER)
def rollout_status(request: HttpRequest, pk: int) -> HttpResponse:
    """The waves and the buttons, polled while the rollout is open; 286 (stop polling) after."""
    rollout = _rollout_or_404(pk)
    return polled(request, "rollouts/_status.html", {**_detail_context(rollout), "polled": True}, going=rollout.is_open)


ACTIONS: dict[str, tuple[Callable[..., Rollout], str]] = {
    "pause": (services.rollout_pause, "pause"),
    "resume": (services.rollout_resume, "resume"),
    "cancel": (services.rollout_cancel, "cancel"),
}


@require_POST
@role_required(OPERATOR)
def rollout_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    service, what = ACTIONS[action]
    try:
        service(rollout=_rollout_or_404(pk), actor=request.user)
    except ValidationError as exc:
        flash_refusal(request, exc, what=what)
    return redirect("rollouts:detail", pk=pk)


@require_POST
@role_required(OPERATOR)
def host_tags(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host, name=name)
    form = HostTagsForm(request.POST)
    if form.is_valid():
        try:
            tags = host_tags_set(host=host, tags=form.cleaned_data["tags"], actor=request.user)
            messages.success(request, f"{host.name}'s tags: {', '.join(tags) or 'none'}.")
        except ValidationError as exc:
            flash_refusal(request, exc, what="set the tags")
    else:
        messages.error(request, "Could not set the tags: " + "; ".join(e for v in form.errors.values() for e in v))
    return redirect("hardware:host_detail", name=host.name)

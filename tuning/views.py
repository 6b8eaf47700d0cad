"""Tuning pages: a host's runs, the form that starts one (over a host that requires review it opens
a change request), each run's live page (its trials, progress, the Pareto plots polled while it
runs; the best trial's diff against the base once it ended) with cancel and propose."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import OPERATOR, VIEWER, role_required
from core.http import by_method, polled
from deployments.presenters import flash_refusal
from deployments.views.lookups import host_or_404
from hardware.models import Host
from hardware.review import ChangeRequested, review_required
from hardware.selectors import offline_reason

from . import presenters, selectors
from .forms import TuningForm
from .services import tuning_cancel, tuning_propose, tuning_start


@require_GET
@role_required(VIEWER)
def tuning_list(request: HttpRequest, name: str) -> HttpResponse:
    host = host_or_404(name)
    return render(
        request,
        "tuning/list.html",
        {"host": host, "runs": selectors.tuning_run_list(host=host), "open": selectors.tuning_run_open(host=host)},
    )


def _new_context(host: Host, form: TuningForm) -> dict[str, Any]:
    shown, folded = form.knob_inputs()
    return {
        "host": host,
        "form": form,
        "knobs_shown": shown,
        "knobs_folded": folded,
        "review": review_required(host),
        "open": selectors.tuning_run_open(host=host),
        "offline_reason": offline_reason(host),
    }


@require_GET
@role_required(VIEWER)
def tuning_new_form(request: HttpRequest, name: str) -> HttpResponse:
    host = host_or_404(name)
    initial = {"base": request.GET.get("base")} if request.GET.get("base") else {}
    return render(request, "tuning/new.html", _new_context(host, TuningForm(host=host, initial=initial)))


@require_POST
@role_required(OPERATOR)
def tuning_new_start(request: HttpRequest, name: str) -> HttpResponse:
    host = host_or_404(name)
    form = TuningForm(request.POST, host=host)
    if form.is_valid():
        try:
            run = tuning_start(host=host, actor=request.user, **form.request())
        except ChangeRequested as exc:  # a protected host: the run waits for another operator's approval
            messages.info(request, " ".join(exc.messages))
            return redirect(exc.change.get_absolute_url())
        except ValidationError as exc:
            form.add_refusal(exc)
        else:
            return redirect("tuning:detail", pk=run.pk)
    return render(request, "tuning/new.html", _new_context(host, form), status=400)


tuning_new = by_method(get=tuning_new_form, post=tuning_new_start)


@require_GET
@role_required(VIEWER)
def tuning_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = selectors.tuning_run_get(pk=pk)
    return render(request, "tuning/detail.html", presenters.run_context(run))


@require_GET
@role_required(VIEWER)
def tuning_status(request: HttpRequest, pk: int) -> HttpResponse:
    """The run's trials, progress, plots and buttons, polled while it runs; 286 (stop polling)
    with its end: the verdict, the best trial's diff and the propose button."""
    run = selectors.tuning_run_get(pk=pk)
    return polled(request, "tuning/_status.html", {**presenters.run_context(run), "polled": True}, going=run.is_open)


@require_POST
@role_required(OPERATOR)
def tuning_cancel_view(request: HttpRequest, pk: int) -> HttpResponse:
    run = selectors.tuning_run_get(pk=pk)
    try:
        tuning_cancel(run=run, actor=request.user)
    except ValidationError as exc:
        flash_refusal(request, exc, what="cancel")
    else:
        messages.info(request, f"Tuning run #{run.pk} stops: the host goes back to r{run.base.number}.")
    return redirect("tuning:detail", pk=pk)


@require_POST
@role_required(OPERATOR)
def tuning_propose_view(request: HttpRequest, pk: int) -> HttpResponse:
    run = selectors.tuning_run_get(pk=pk)
    group = str(request.POST.get("group") or "").strip()[:64]
    batch_size = str(request.POST.get("batch_size") or "1").strip()[:8]
    try:
        proposal = tuning_propose(run=run, actor=request.user, group=group, batch_size=batch_size)
    except ValidationError as exc:
        flash_refusal(request, exc, what="roll it out" if group else "propose it")
        return redirect("tuning:detail", pk=pk)
    if proposal.change_request is not None:
        messages.info(
            request,
            f"r{proposal.revision.number} proposed: change request #{proposal.change_request} waits for another "
            "operator's approval.",
        )
        return redirect("changes:detail", pk=proposal.change_request)
    if proposal.rollout is not None:
        messages.success(request, f"Rolling out the tuning run's best to {proposal.rollout.group}: its canary first.")
        return redirect("rollouts:detail", pk=proposal.rollout.pk)
    assert proposal.operation is not None
    messages.success(request, f"Switching {run.host.name} to r{proposal.revision.number}, the tuning run's best.")
    return redirect("deployments:operation_detail", pk=proposal.operation.pk)

"""Change requests' pages: the list, one request (diff, planner, exports, conversation,
decision), the decision's POST, and the admin's switch that a host requires review."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import ADMIN, OPERATOR, VIEWER, role_required
from deployments.presenters import flash_refusal
from hardware.models import Host

from .choices import ChangeState
from .forms import DecisionForm, HostReviewForm
from .models import ChangeRequest
from .selectors import change_list, change_page
from .services import change_decide, host_review_set

LIST_LIMIT = 200


@require_GET
@role_required(VIEWER)
def change_list_view(request: HttpRequest) -> HttpResponse:
    show_all = request.GET.get("state") == "all"
    host = Host.objects.filter(name=request.GET.get("host", "")[:100]).first() if request.GET.get("host") else None
    changes = list(change_list(host=host, pending=not show_all)[:LIST_LIMIT])
    return render(request, "changes/change_list.html", {"changes": changes, "show_all": show_all, "host": host})


@require_GET
@role_required(VIEWER)
def change_detail(request: HttpRequest, pk: int) -> HttpResponse:
    change = get_object_or_404(ChangeRequest.objects.select_related("host", "author", "decided_by", "operation"), pk=pk)
    is_author = change.author_id is not None and change.author_id == request.user.pk
    context = {
        "page": change_page(change),
        "change": change,
        "comments": change.comments.select_related("author"),
        "is_author": is_author,
        "form": DecisionForm(),
        "changes_requested": change.state == ChangeState.CHANGES_REQUESTED,
    }
    return render(request, "changes/change_detail.html", context)


@require_POST
@role_required(OPERATOR)
def change_decide_view(request: HttpRequest, pk: int) -> HttpResponse:
    change = get_object_or_404(ChangeRequest, pk=pk)
    form = DecisionForm(request.POST)
    try:
        if not form.is_valid():
            raise ValidationError(form.errors.as_data())
        change_decide(
            change=change,
            verdict=form.cleaned_data["verdict"],
            comment=form.cleaned_data["comment"],
            actor=request.user,
            seen=form.cleaned_data["seen"],
        )
    except ValidationError as exc:
        flash_refusal(request, exc)
    else:
        change.refresh_from_db()
        messages.success(request, f"Request #{change.pk}: {change.get_state_display().lower()}.")
    return redirect("changes:detail", pk=change.pk)


@require_POST
@role_required(ADMIN)
def host_review(request: HttpRequest, host: str) -> HttpResponse:
    found = get_object_or_404(Host, name=host)
    form = HostReviewForm(request.POST)
    required = form.cleaned_data["required"] if form.is_valid() else False
    host_review_set(host=found, required=required, actor=request.user)
    messages.success(
        request, f"Changes to {found.name} {'need' if required else 'no longer need'} another person's review."
    )
    return redirect("hardware:host_detail", name=found.name)

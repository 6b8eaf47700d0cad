"""The notifications page (admins): channels, rules, recent deliveries, and a test message."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import ADMIN, role_required
from core.http import by_method

from . import selectors, services
from .choices import DeliveryState
from .forms import ChannelForm, RuleForm
from .models import Channel, Rule


def _apply_error(form: Any, exc: ValidationError) -> None:
    if hasattr(exc, "error_dict"):
        for key, errors in exc.message_dict.items():
            form.add_error(key if key in form.fields else None, errors)
    else:
        form.add_error(None, exc.messages)


def _deliveries_context() -> dict[str, Any]:
    deliveries = selectors.delivery_list()
    busy = any(d.state in (DeliveryState.PENDING, DeliveryState.SENDING) for d in deliveries)
    return {"deliveries": deliveries, "busy": busy}


@require_GET
@role_required(ADMIN)
def index(request: HttpRequest) -> HttpResponse:
    context = {
        "channels": selectors.channel_list(),
        "rules": selectors.rule_list(),
        **_deliveries_context(),
    }
    return render(request, "notifications/index.html", context)


@require_GET
@role_required(ADMIN)
def deliveries(request: HttpRequest) -> HttpResponse:
    """The recent deliveries, polled by the page while one is pending."""
    return render(request, "notifications/_deliveries.html", _deliveries_context())


# --- channels -------------------------------------------------------------------------------------


def _channel_page(request: HttpRequest, form: ChannelForm, channel: Channel | None, status: int = 200) -> HttpResponse:
    return render(request, "notifications/channel_form.html", {"form": form, "channel": channel}, status=status)


@require_GET
@role_required(ADMIN)
def channel_new_page(request: HttpRequest) -> HttpResponse:
    return _channel_page(request, ChannelForm(), None)


@require_POST
@role_required(ADMIN)
def channel_new_submit(request: HttpRequest) -> HttpResponse:
    form = ChannelForm(request.POST)
    if form.is_valid():
        try:
            channel = services.channel_create(
                name=form.cleaned_data["name"],
                url=form.cleaned_data["url"],
                enabled=form.cleaned_data["enabled"],
                actor=request.user,
            )
        except ValidationError as exc:
            _apply_error(form, exc)
        else:
            messages.success(request, f"Channel {channel.name} ({channel.service}) added. Send it a test message.")
            return redirect("notifications:index")
    return _channel_page(request, form, None, status=400)


@require_GET
@role_required(ADMIN)
def channel_edit_page(request: HttpRequest, pk: UUID) -> HttpResponse:
    channel = get_object_or_404(Channel, pk=pk)
    form = ChannelForm(initial={"name": channel.name, "enabled": channel.enabled}, editing=True)
    return _channel_page(request, form, channel)


@require_POST
@role_required(ADMIN)
def channel_edit_submit(request: HttpRequest, pk: UUID) -> HttpResponse:
    channel = get_object_or_404(Channel, pk=pk)
    form = ChannelForm(request.POST, editing=True)
    if form.is_valid():
        try:
            services.channel_update(
                channel=channel,
                name=form.cleaned_data["name"],
                url=form.cleaned_data["url"] or "",
                enabled=form.cleaned_data["enabled"],
                actor=request.user,
            )
        except ValidationError as exc:
            _apply_error(form, exc)
            channel.refresh_from_db()
        else:
            messages.success(request, f"Channel {channel.name} saved.")
            return redirect("notifications:index")
    return _channel_page(request, form, channel, status=400)


@require_POST
@role_required(ADMIN)
def channel_delete(request: HttpRequest, pk: UUID) -> HttpResponse:
    channel = get_object_or_404(Channel, pk=pk)
    name = channel.name
    services.channel_delete(channel=channel, actor=request.user)
    messages.success(request, f"Channel {name} and its rules deleted; its past deliveries stay listed.")
    return redirect("notifications:index")


@require_POST
@role_required(ADMIN)
def channel_test(request: HttpRequest, pk: UUID) -> HttpResponse:
    channel = get_object_or_404(Channel, pk=pk)
    services.channel_test_send(channel=channel, actor=request.user)
    messages.success(request, f"A test message to {channel.name} is on its way: see Recent deliveries.")
    return redirect("notifications:index")


# --- rules ----------------------------------------------------------------------------------------


def _rule_page(request: HttpRequest, form: RuleForm, rule: Rule | None, status: int = 200) -> HttpResponse:
    return render(request, "notifications/rule_form.html", {"form": form, "rule": rule}, status=status)


def _rule_save(request: HttpRequest, form: RuleForm, rule: Rule | None) -> HttpResponse:
    if form.is_valid():
        data = form.cleaned_data
        fields = {
            "channel": data["channel"],
            "host": data["host"],
            "events": list(data["events"]),
            "thresholds": form.thresholds(),
            "enabled": data["enabled"],
            "actor": request.user,
        }
        try:
            if rule is None:
                services.rule_create(**fields)
            else:
                services.rule_update(rule=rule, **fields)
        except ValidationError as exc:
            _apply_error(form, exc)
        else:
            messages.success(request, "Rule saved.")
            return redirect("notifications:index")
    return _rule_page(request, form, rule, status=400)


@require_GET
@role_required(ADMIN)
def rule_new_page(request: HttpRequest) -> HttpResponse:
    if not Channel.objects.exists():
        messages.info(request, "Add a channel first: a rule says which events go to which channel.")
    return _rule_page(request, RuleForm(), None)


@require_POST
@role_required(ADMIN)
def rule_new_submit(request: HttpRequest) -> HttpResponse:
    return _rule_save(request, RuleForm(request.POST), None)


@require_GET
@role_required(ADMIN)
def rule_edit_page(request: HttpRequest, pk: UUID) -> HttpResponse:
    rule = get_object_or_404(Rule.objects.select_related("channel", "host"), pk=pk)
    initial: dict[str, Any] = {
        "channel": rule.channel_id,
        "host": rule.host.name if rule.host else None,
        "events": rule.events,
        "enabled": rule.enabled,
    }
    thresholds = rule.thresholds if isinstance(rule.thresholds, dict) else {}
    for field in RuleForm.base_fields:
        if field.startswith("threshold_"):
            initial[field] = thresholds.get(field.removeprefix("threshold_"))
    return _rule_page(request, RuleForm(initial=initial), rule)


@require_POST
@role_required(ADMIN)
def rule_edit_submit(request: HttpRequest, pk: UUID) -> HttpResponse:
    rule = get_object_or_404(Rule.objects.select_related("channel", "host"), pk=pk)
    return _rule_save(request, RuleForm(request.POST), rule)


@require_POST
@role_required(ADMIN)
def rule_delete(request: HttpRequest, pk: UUID) -> HttpResponse:
    rule = get_object_or_404(Rule.objects.select_related("channel", "host"), pk=pk)
    services.rule_delete(rule=rule, actor=request.user)
    messages.success(request, "Rule deleted.")
    return redirect("notifications:index")


channel_new = by_method(get=channel_new_page, post=channel_new_submit)
channel_edit = by_method(get=channel_edit_page, post=channel_edit_submit)
rule_new = by_method(get=rule_new_page, post=rule_new_submit)
rule_edit = by_method(get=rule_edit_page, post=rule_edit_submit)

"""The notifications page (admins): channels, rules, recent deliveries, and a test message."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import ADMIN, role_required
from core.http import by_method, form_save

from . import selectors, services
from .choices import DeliveryState
from .forms import ChannelForm, RuleForm
from .models import Channel, Rule


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


def _channel_save(request: HttpRequest, form: ChannelForm, channel: Channel | None) -> HttpResponse:
    def save(data: dict[str, Any]) -> Channel:
        fields = {"name": data["name"], "url": data["url"] or "", "enabled": data["enabled"], "actor": request.user}
        if channel is None:
            return services.channel_create(**fields)
        return services.channel_update(channel=channel, **fields)

    saved = form_save(form, save)
    if saved is None:
        if channel is not None:
            channel.refresh_from_db()  # a refused update may have changed the object in memory
        return _channel_page(request, form, channel, status=400)
    if channel is None:
        messages.success(request, f"Channel {saved.name} ({saved.service}) added. Send it a test message.")
    else:
        messages.success(request, f"Channel {saved.name} saved.")
    return redirect("notifications:index")


@require_POST
@role_required(ADMIN)
def channel_new_submit(request: HttpRequest) -> HttpResponse:
    return _channel_save(request, ChannelForm(request.POST), None)


@require_GET
@role_required(ADMIN)
def channel_edit_page(request: HttpRequest, pk: UUID) -> HttpResponse:
    channel = get_object_or_404(Channel, pk=pk)
    form = ChannelForm(initial={"name": channel.name, "enabled": channel.enabled}, editing=True)
    return _channel_page(request, form, channel)


@require_POST
@role_required(ADMIN)
def channel_edit_submit(request: HttpRequest, pk: UUID) -> HttpResponse:
    return _channel_save(request, ChannelForm(request.POST, editing=True), get_object_or_404(Channel, pk=pk))


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


def _rule_or_404(pk: UUID) -> Rule:
    return get_object_or_404(Rule.objects.select_related("channel", "host"), pk=pk)


def _rule_page(request: HttpRequest, form: RuleForm, rule: Rule | None, status: int = 200) -> HttpResponse:
    return render(request, "notifications/rule_form.html", {"form": form, "rule": rule}, status=status)


def _rule_save(request: HttpRequest, form: RuleForm, rule: Rule | None) -> HttpResponse:
    def save(data: dict[str, Any]) -> Rule:
        fields = {
            "channel": data["channel"],
            "host": data["host"],
            "events": list(data["events"]),
            "thresholds": form.thresholds(),
            "enabled": data["enabled"],
            "actor": request.user,
        }
        return services.rule_create(**fields) if rule is None else services.rule_update(rule=rule, **fields)

    if form_save(form, save) is None:
        return _rule_page(request, form, rule, status=400)
    messages.success(request, "Rule saved.")
    return redirect("notifications:index")


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
    rule = _rule_or_404(pk)
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
    return _rule_save(request, RuleForm(request.POST), _rule_or_404(pk))


@require_POST
@role_required(ADMIN)
def rule_delete(request: HttpRequest, pk: UUID) -> HttpResponse:
    rule = _rule_or_404(pk)
    services.rule_delete(rule=rule, actor=request.user)
    messages.success(request, "Rule deleted.")
    return redirect("notifications:index")


channel_new = by_method(get=channel_new_page, post=channel_new_submit)
channel_edit = by_method(get=channel_edit_page, post=channel_edit_submit)
rule_new = by_method(get=rule_new_page, post=rule_new_submit)
rule_edit = by_method(get=rule_edit_page, post=rule_edit_submit)

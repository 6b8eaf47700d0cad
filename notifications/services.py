"""Notifications: admins' channels and rules, `notify(event)` for the places that record what
happened, and the delivery a Celery task on the panel's queue carries out.

`notify` does nothing until the caller's transaction commits; then it matches the rules,
records one Delivery per channel and queues it. Sending happens in the panel's worker, so a
slow or failing channel never holds up the operation that raised the event.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from controlpanel.celery import send_for_row
from controlpanel.roles import ADMIN, ensure_role
from core.audit import audit_record, audited_delete, audited_save, person_of
from core.secrets_mask import mask_text
from hardware.models import Host
from hardware.selectors import offline_reason
from hardware.services import host_event_record

from .choices import RULE_EVENTS, DeliveryState, EventKind, severity
from .events import Event, presence_event
from .messages import Message, absolute, render
from .models import Channel, Delivery, HostPresence, Rule
from .regression import BY_KEY
from .secrets import UndecryptableError, url_decrypt, url_encrypt

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

log = logging.getLogger(__name__)
RULE_EVENT_VALUES = {value for value, _ in RULE_EVENTS}
DELIVER_TASK = "notifications.tasks.deliver_notification"  # notifications.tasks registers it
# A delivery being sent ends within the task's time limit (notifications.tasks, 150 s): one still
# `sending` after this long lost its worker (SIGKILL, OOM, the machine), and is sent again.
SEND_DEADLINE = timedelta(seconds=180)
# A delivery still `pending` this long after it was queued lost its message: it is queued again
# (the claim in delivery_send takes it once, so a second message does nothing).
PENDING_RESEND_AFTER = timedelta(minutes=10)
WORKER_LOST = "The worker sending it stopped (killed, or its machine went away) before the channel answered."


# --- channels and rules (admins) ---------------------------------------------------------------


def _url_info(url: str) -> Any:
    from .channels import ChannelUrlError, channel_check  # Apprise loads only where it is used

    try:
        return channel_check(url)
    except ChannelUrlError as exc:
        raise ValidationError({"url": str(exc)}) from exc


def _name(name: str) -> str:
    name = (name or "").strip()
    if not name or len(name) > 80 or any(ord(c) < 32 for c in name):
        raise ValidationError({"name": "A channel needs a name of one line, at most 80 characters."})
    return name


@transaction.atomic
def channel_create(*, name: str, url: str, enabled: bool = True, actor: AbstractUser | None) -> Channel:
    ensure_role(actor, ADMIN)
    name = _name(name)
    if Channel.objects.filter(name=name).exists():
        raise ValidationError({"name": f"There is already a channel named {name}."})
    info = _url_info(url)
    channel = Channel(
        name=name,
        scheme=info.scheme,
        service=info.service,
        url_ciphertext=url_encrypt(url.strip()),
        enabled=enabled,
        created_by=person_of(actor),
    )
    audited_save(
        channel,
        action="notification.channel.create",
        summary=f"notification channel {name} ({info.service})",
        data={"service": info.service, "scheme": info.scheme, "enabled": enabled},
        actor=actor,
    )
    return channel


@transaction.atomic
def channel_update(*, channel: Channel, name: str, url: str = "", enabled: bool, actor: AbstractUser | None) -> Channel:
    """Rename, enable or disable; a new URL replaces the stored one (blank keeps it)."""
    ensure_role(actor, ADMIN)
    name = _name(name)
    if Channel.objects.filter(name=name).exclude(pk=channel.pk).exists():
        raise ValidationError({"name": f"There is already a channel named {name}."})
    changed = [f for f, new in (("name", name), ("enabled", enabled)) if getattr(channel, f) != new]
    channel.name, channel.enabled = name, enabled
    if url.strip():
        info = _url_info(url)
        channel.scheme, channel.service = info.scheme, info.service
        channel.url_ciphertext = url_encrypt(url.strip())
        changed.append("url")
    channel.updated_at = timezone.now()
    audited_save(
        channel,
        action="notification.channel.update",
        summary=f"notification channel {name}: {', '.join(changed) or 'nothing'} changed",
        # "url" says the URL was replaced, never what it was or is.
        data={"changed": changed, "service": channel.service, "enabled": enabled},
        actor=actor,
    )
    return channel


@transaction.atomic
def channel_delete(*, channel: Channel, actor: AbstractUser | None) -> None:
    ensure_role(actor, ADMIN)
    audited_delete(
        channel,
        action="notification.channel.delete",
        summary=f"notification channel {channel.name} ({channel.service}) deleted",
        data={"service": channel.service, "rules": channel.rules.count()},
        actor=actor,
    )


def _rule_input(events: list[str], thresholds: dict[str, Any]) -> tuple[list[str], dict[str, float]]:
    chosen = list(dict.fromkeys(events or []))
    unknown = [e for e in chosen if e not in RULE_EVENT_VALUES]
    if unknown or not chosen:
        raise ValidationError({"events": "Choose one or more of the events listed."})
    clean: dict[str, float] = {}
    for key, value in (thresholds or {}).items():
        if value in (None, ""):
            continue
        if key not in BY_KEY:
            raise ValidationError({"thresholds": f"Unknown benchmark metric {key!r}."})
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = float("nan")
        if not 0 < number <= 1000:  # also refuses nan and inf
            raise ValidationError({f"threshold_{key}": "A limit is a percentage above 0 and at most 1000."})
        clean[key] = number
    if EventKind.BENCHMARK_REGRESSED in chosen and not clean:
        raise ValidationError({"thresholds": "A rule for benchmark regressions needs a limit for at least one metric."})
    return chosen, clean


def _rule_fill(
    rule: Rule,
    *,
    channel: Channel,
    host: Host | None,
    events: list[str],
    thresholds: dict[str, Any] | None,
    enabled: bool,
) -> None:
    """Check a rule's settings (ValidationError, nothing set) and set them on `rule`."""
    chosen, clean = _rule_input(events, thresholds or {})
    rule.channel, rule.host, rule.events, rule.thresholds, rule.enabled = channel, host, chosen, clean, enabled


def _rule_summary(rule: Rule) -> dict[str, Any]:
    return {
        "channel": rule.channel.name,
        "host": rule.host.name if rule.host else None,
        "events": rule.events,
        "thresholds": rule.thresholds,
        "enabled": rule.enabled,
    }


@transaction.atomic
def rule_create(
    *,
    channel: Channel,
    host: Host | None,
    events: list[str],
    thresholds: dict[str, Any] | None = None,
    enabled: bool = True,
    actor: AbstractUser | None,
) -> Rule:
    ensure_role(actor, ADMIN)
    rule = Rule(created_by=person_of(actor))
    _rule_fill(rule, channel=channel, host=host, events=events, thresholds=thresholds, enabled=enabled)
    where = host.name if host else "every host"
    audited_save(
        rule,
        action="notification.rule.create",
        summary=f"notify {channel.name} of {len(rule.events)} event(s) on {where}",
        host=host,
        data=_rule_summary(rule),
        actor=actor,
    )
    return rule


@transaction.atomic
def rule_update(
    *,
    rule: Rule,
    channel: Channel,
    host: Host | None,
    events: list[str],
    thresholds: dict[str, Any] | None = None,
    enabled: bool,
    actor: AbstractUser | None,
) -> Rule:
    ensure_role(actor, ADMIN)
    before = _rule_summary(rule)
    _rule_fill(rule, channel=channel, host=host, events=events, thresholds=thresholds, enabled=enabled)
    audited_save(
        rule,
        action="notification.rule.update",
        summary=f"notification rule to {channel.name} changed",
        host=host,
        data={"before": before, "after": _rule_summary(rule)},
        actor=actor,
    )
    return rule


@transaction.atomic
def rule_delete(*, rule: Rule, actor: AbstractUser | None) -> None:
    ensure_role(actor, ADMIN)
    audited_delete(
        rule,
        action="notification.rule.delete",
        summary=f"notification rule to {rule.channel.name} deleted",
        host=rule.host,
        data=_rule_summary(rule),
        actor=actor,
    )


# --- raising events -----------------------------------------------------------------------------


def notify(event: Event | None) -> None:
    """Hand an event to the matching rules once the caller's transaction commits (at once
    outside one). Never raises into the caller: a notification is not worth an operation."""
    if event is None:
        return
    transaction.on_commit(partial(_dispatch_safely, event), robust=True)


def _dispatch_safely(event: Event) -> None:
    try:
        notifications_dispatch(event=event)
    except Exception:
        log.exception("notification %s for %s could not be dispatched", event.kind, event.host_name or "-")


def matching_rules(*, event: Event) -> list[Rule]:
    """Enabled rules of enabled channels that watch this event, on its host or on every host;
    a host's own rules first, then the global ones, each in the order they were made."""
    rules = (
        Rule.objects.filter(enabled=True, channel__enabled=True)
        .filter(Q(host__isnull=True) | Q(host_id=event.host_id))
        .select_related("channel")
        .order_by(F("host_id").asc(nulls_last=True), "created_at")
    )
    return [r for r in rules if isinstance(r.events, list) and event.kind in r.events]


def notifications_dispatch(*, event: Event) -> list[Delivery]:
    """One Delivery per channel (the first matching rule of a channel decides its message),
    each queued for the panel's worker."""
    now = timezone.now()
    deliveries = []
    seen: set[Any] = set()
    for rule in matching_rules(event=event):
        if rule.channel_id in seen:
            continue
        message = render(event, thresholds=rule.thresholds or {}, when=now)
        if message is None:
            continue
        seen.add(rule.channel_id)
        deliveries.append(
            _delivery(
                channel=rule.channel,
                rule=rule,
                kind=event.kind,
                host_id=event.host_id,
                host_name=event.host_name,
                msg=message,
            )
        )
    for delivery in deliveries:
        _enqueue(delivery)
    return deliveries


def _delivery(
    *,
    channel: Channel,
    rule: Rule | None,
    kind: str,
    msg: Message,
    host_id: int | None = None,
    host_name: str = "",
    actor: AbstractUser | None = None,
) -> Delivery:
    return Delivery.objects.create(
        channel=channel,
        channel_name=channel.name,
        rule=rule,
        event=kind,
        host_id=host_id,
        host_name=host_name,
        title=msg.title,
        body=msg.body,
        link=msg.link,
        requested_by=person_of(actor),
    )


def _enqueue(delivery: Delivery) -> None:
    """Sent by task name, as operations are (deployments.services.dispatch): the task module
    reads this one, never the other way round."""
    try:
        send_for_row(DELIVER_TASK, queue=settings.NOTIFICATIONS_QUEUE, key="delivery_id", pk=delivery.pk)
    except Exception as exc:  # the broker is away: the delivery says so (and is tried again), the caller goes on
        error = f"Could not be queued for sending: {type(exc).__name__}: {exc}"
        delivery.attempts += 1  # a try that did not get as far as the channel
        Delivery.objects.filter(pk=delivery.pk).update(attempts=delivery.attempts)
        if not _retry_later(delivery, error):
            _finish(delivery.pk, delivered=False, error=error)


def channel_test_send(*, channel: Channel, actor: AbstractUser | None) -> Delivery:
    """A test message to one channel (enabled or not), recorded like any other delivery."""
    ensure_role(actor, ADMIN)
    who = getattr(actor, "username", "") or "the panel"
    msg = Message(
        title=f"Test from the LLM control panel ({channel.name})",
        body=(
            f"A test message to the channel {channel.name}, sent by {who}. "
            "If you read this, the panel can reach you here.\n"
            f"Details: {absolute('/notifications/')}\nAt: {timezone.now():%Y-%m-%d %H:%M:%S} UTC"
        ),
        link=absolute("/notifications/"),
    )
    with transaction.atomic():
        delivery = _delivery(channel=channel, rule=None, kind=EventKind.TEST, msg=msg, actor=actor)
        audit_record(
            action="notification.test",
            summary=f"test message to notification channel {channel.name}",
            obj=channel,
            data={"delivery": str(delivery.pk)},
            actor=actor,
        )
        transaction.on_commit(partial(_enqueue, delivery), robust=True)
    return delivery


# --- delivering (the panel's worker) --------------------------------------------------------------


def _finish(pk: UUID | str, *, delivered: bool, error: str = "", seconds: float | None = None) -> None:
    Delivery.objects.filter(pk=pk).update(
        state=DeliveryState.DELIVERED if delivered else DeliveryState.FAILED,
        error=mask_text(error)[:2000],
        retry_at=None,
        seconds=seconds,
        finished_at=timezone.now(),
    )


def _retry_later(delivery: Delivery, error: str, *, now: datetime | None = None) -> bool:
    """Mark a failed delivery (`attempts` as now stored) to be sent again after the next wait of
    NOTIFICATIONS_RETRY_S; False when it has had them all, or is a test message (the person
    sending it watches)."""
    waits = list(settings.NOTIFICATIONS_RETRY_S)
    if delivery.event == EventKind.TEST or not 0 < delivery.attempts <= len(waits):
        return False
    wait = waits[delivery.attempts - 1]
    return bool(
        Delivery.objects.filter(pk=delivery.pk, state__in=(DeliveryState.PENDING, DeliveryState.SENDING)).update(
            state=DeliveryState.RETRY,
            error=mask_text(error)[:2000],
            retry_at=(now or timezone.now()) + timedelta(seconds=wait),
            finished_at=now or timezone.now(),
        )
    )


def deliveries_retry(*, now: datetime | None = None) -> int:
    """Beat: queue again the deliveries whose retry is due; returns how many. First, those whose
    worker died while sending are marked for a retry, and those whose message was lost queued again."""
    now = now or timezone.now()
    _deliveries_recover(now)
    due = list(Delivery.objects.filter(state=DeliveryState.RETRY, retry_at__lte=now).order_by("retry_at")[:500])
    queued = 0
    for delivery in due:
        # Only the check that takes the row queues it (two beats never send it twice).
        if Delivery.objects.filter(pk=delivery.pk, state=DeliveryState.RETRY).update(
            state=DeliveryState.PENDING, retry_at=None
        ):
            _enqueue(delivery)
            queued += 1
    return queued


def _deliveries_recover(now: datetime) -> None:
    """The Delivery row is the truth, not the broker's message (docs/architecture.md, "Tasks and
    acknowledgements"): a send whose deadline passed is retried (it may have reached the channel:
    a notification may arrive twice, never not at all), a pending one whose message is gone is
    queued again."""
    for delivery in Delivery.objects.filter(state=DeliveryState.SENDING, retry_at__lte=now)[:500]:
        if not _retry_later(delivery, WORKER_LOST, now=now):
            Delivery.objects.filter(pk=delivery.pk, state=DeliveryState.SENDING).update(
                state=DeliveryState.FAILED, error=WORKER_LOST, retry_at=None, finished_at=now
            )
    pending = Delivery.objects.filter(state=DeliveryState.PENDING, created_at__lt=now - PENDING_RESEND_AFTER)
    for delivery in pending.filter(Q(retry_at__isnull=True) | Q(retry_at__lte=now))[:500]:
        if Delivery.objects.filter(pk=delivery.pk, state=DeliveryState.PENDING).update(
            retry_at=now + PENDING_RESEND_AFTER
        ):
            _enqueue(delivery)


def deliveries_prune(*, now: datetime | None = None) -> int:
    """Beat: delete deliveries older than NOTIFICATIONS_KEPT_DAYS (but those still to be sent)."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.NOTIFICATIONS_KEPT_DAYS)
    old = Delivery.objects.filter(created_at__lt=cutoff, state__in=(DeliveryState.DELIVERED, DeliveryState.FAILED))
    deleted, _ = old.delete()
    return deleted


def delivery_send(*, delivery_id: UUID | str) -> str:
    """Send one recorded delivery; records delivered, or the channel's error: failed, or to be
    sent again later (NOTIFICATIONS_RETRY_S). A delivery already taken (a message delivered
    twice) is left alone."""
    taken = Delivery.objects.filter(pk=delivery_id, state=DeliveryState.PENDING).update(
        state=DeliveryState.SENDING, attempts=F("attempts") + 1, retry_at=timezone.now() + SEND_DEADLINE
    )
    if not taken:
        return "skipped"
    delivery = Delivery.objects.select_related("channel").get(pk=delivery_id)
    if delivery.channel is None:
        _finish(delivery.pk, delivered=False, error="The channel was deleted before the message was sent.")
        return DeliveryState.FAILED
    if delivery.attempts > 1 and not delivery.channel.enabled:  # a retry; a test message may go to a disabled one
        _finish(delivery.pk, delivered=False, error="The channel was disabled before the message was sent again.")
        return DeliveryState.FAILED
    try:
        url = url_decrypt(delivery.channel.url_ciphertext)
    except UndecryptableError as exc:
        _finish(delivery.pk, delivered=False, error=str(exc))
        return DeliveryState.FAILED
    from .channels import channel_send

    result = channel_send(url, title=delivery.title, body=delivery.body, notify_type=severity(delivery.event))
    if not result.delivered:
        log.warning("notification to channel %s failed: %s", delivery.channel_name, result.error)
        if _retry_later(delivery, result.error):
            Delivery.objects.filter(pk=delivery.pk).update(seconds=round(result.seconds, 3))
            return DeliveryState.RETRY
    _finish(delivery.pk, delivered=result.delivered, error=result.error, seconds=round(result.seconds, 3))
    return DeliveryState.DELIVERED if result.delivered else DeliveryState.FAILED


# --- hosts going offline and coming back ---------------------------------------------------------


def hosts_presence_check() -> list[Event]:
    """Beat: compare each host's presence (Host.is_online, as every page decides it) with
    what the last check saw, and raise host.offline / host.online on a change. A host seen
    for the first time is only recorded; demo hosts and hosts that never reported are left out."""
    events: list[Event] = []
    known = {p.host_id: p for p in HostPresence.objects.all()}
    for host in Host.objects.filter(is_demo=False, last_heartbeat__isnull=False):
        online = host.is_online
        seen = known.get(host.pk)
        if seen is None:
            HostPresence.objects.get_or_create(host=host, defaults={"online": online})
            continue
        if seen.online == online:
            continue
        with transaction.atomic():
            # Only the check that flips the row raises the event (two beats never send it twice).
            if not HostPresence.objects.filter(pk=host.pk, online=seen.online).update(
                online=online, changed_at=timezone.now()
            ):
                continue
            reason = "" if online else offline_reason(host)
            event = presence_event(host, online=online, reason=reason)
            host_event_record(host=host, kind=event.kind, summary=event.summary, reason=reason)
            notify(event)
            events.append(event)
    return events

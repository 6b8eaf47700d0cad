from django.db import models

from hardware.models import HostEvent

HOST = HostEvent.Kind  # a host's own events (its events page) are notification events too


class EventKind(models.TextChoices):
    SWITCH_FAILED = "switch.failed", "Switch failed (nothing rolled back)"
    SWITCH_REFUSED = "switch.refused", "Switch refused (the old revision kept serving)"
    SWITCH_ROLLED_BACK = "switch.rolled_back", "Switch failed and rolled back"
    ROLLBACK_FAILED = "switch.rollback_failed", "Switch failed and the rollback failed too"
    WATCHDOG_RESTARTED = HOST.WATCHDOG_RESTARTED.value, HOST.WATCHDOG_RESTARTED.label
    WATCHDOG_RESTART_FAILED = HOST.WATCHDOG_RESTART_FAILED.value, HOST.WATCHDOG_RESTART_FAILED.label
    WATCHDOG_GAVE_UP = HOST.WATCHDOG_GAVE_UP.value, HOST.WATCHDOG_GAVE_UP.label
    HOST_OFFLINE = HOST.HOST_OFFLINE.value, HOST.HOST_OFFLINE.label
    HOST_ONLINE = HOST.HOST_ONLINE.value, HOST.HOST_ONLINE.label
    AGENT_RESTARTED = HOST.AGENT_RESTARTED.value, HOST.AGENT_RESTARTED.label
    TABLE_REFUSED = HOST.TABLE_REFUSED.value, HOST.TABLE_REFUSED.label
    DOOR_DOWN = HOST.DOOR_DOWN.value, HOST.DOOR_DOWN.label
    DOOR_UP = HOST.DOOR_UP.value, HOST.DOOR_UP.label
    BENCHMARK_REGRESSED = "benchmark.regressed", "Benchmark regressed against the previous revision"
    INSTALL_FAILED = "install.failed", "Engine install failed"
    DOWNLOAD_FAILED = "download.failed", "Model download failed"
    CHANGE_OPENED = "change.opened", "Change request opened (a protected host)"
    CHANGE_APPROVED = "change.approved", "Change request approved (it ran)"
    CHANGE_REJECTED = "change.rejected", "Change request rejected"
    SCHEDULE_RAN = "schedule.ran", "Scheduled change ran"
    SCHEDULE_FAILED = "schedule.failed", "Scheduled change failed"
    ROLLOUT_STARTED = "rollout.started", "Rollout across hosts started"
    ROLLOUT_STOPPED = "rollout.stopped", "Rollout stopped (a wave failed, or it was cancelled)"
    ROLLOUT_FINISHED = "rollout.finished", "Rollout finished on every host"
    TEST = "test", "Test message"


# How bad each event is, as Apprise's notify_type (the JSON webhook's "type", a chat's colour or icon).
SEVERITY: dict[str, str] = {
    EventKind.SWITCH_FAILED: "failure",
    EventKind.SWITCH_REFUSED: "warning",
    EventKind.SWITCH_ROLLED_BACK: "failure",
    EventKind.ROLLBACK_FAILED: "failure",
    EventKind.WATCHDOG_RESTARTED: "warning",
    EventKind.WATCHDOG_RESTART_FAILED: "failure",
    EventKind.WATCHDOG_GAVE_UP: "failure",
    EventKind.HOST_OFFLINE: "failure",
    EventKind.HOST_ONLINE: "success",
    EventKind.AGENT_RESTARTED: "warning",
    EventKind.TABLE_REFUSED: "warning",
    EventKind.DOOR_DOWN: "failure",
    EventKind.DOOR_UP: "success",
    EventKind.BENCHMARK_REGRESSED: "warning",
    EventKind.INSTALL_FAILED: "failure",
    EventKind.DOWNLOAD_FAILED: "failure",
    EventKind.CHANGE_OPENED: "info",
    EventKind.CHANGE_APPROVED: "success",
    EventKind.CHANGE_REJECTED: "warning",
    EventKind.SCHEDULE_RAN: "info",
    EventKind.SCHEDULE_FAILED: "failure",
    EventKind.ROLLOUT_STARTED: "info",
    EventKind.ROLLOUT_STOPPED: "failure",
    EventKind.ROLLOUT_FINISHED: "success",
    EventKind.TEST: "info",
}


def severity(event: str) -> str:
    """The Apprise notify_type of an event kind ("info" for one this version does not know)."""
    return SEVERITY.get(event, "info")


# What a rule may watch (a test message is sent from the page, never by a rule).
RULE_EVENTS = [(value, label) for value, label in EventKind.choices if value != EventKind.TEST]


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending"
    RETRY = "retry", "Failed, will retry"  # sent again at Delivery.retry_at (services.deliveries_retry)
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"

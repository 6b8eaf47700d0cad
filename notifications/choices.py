from django.db import models


class EventKind(models.TextChoices):
    SWITCH_FAILED = "switch.failed", "Switch failed (nothing rolled back)"
    SWITCH_ROLLED_BACK = "switch.rolled_back", "Switch failed and rolled back"
    ROLLBACK_FAILED = "switch.rollback_failed", "Switch failed and the rollback failed too"
    WATCHDOG_RESTARTED = "watchdog.restarted", "Watchdog restarted the engine"
    WATCHDOG_RESTART_FAILED = "watchdog.restart_failed", "Watchdog could not restart the engine"
    WATCHDOG_GAVE_UP = "watchdog.gave_up", "Watchdog gave up"
    HOST_OFFLINE = "host.offline", "Host went offline"
    HOST_ONLINE = "host.online", "Host came back"
    BENCHMARK_REGRESSED = "benchmark.regressed", "Benchmark regressed against the previous revision"
    INSTALL_FAILED = "install.failed", "Engine install failed"
    DOWNLOAD_FAILED = "download.failed", "Model download failed"
    TEST = "test", "Test message"


# What a rule may watch (a test message is sent from the page, never by a rule).
RULE_EVENTS = [(value, label) for value, label in EventKind.choices if value != EventKind.TEST]


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    SENDING = "sending", "Sending"
    RETRY = "retry", "Failed, will retry"  # sent again at Delivery.retry_at (services.deliveries_retry)
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"

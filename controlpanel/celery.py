"""The Celery app. Settings come from Django's settings under the CELERY_ namespace."""

import os
from typing import Any

from celery import Celery
from celery.worker.consumer import Consumer as CeleryConsumer

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")

app = Celery("controlpanel")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# What a worker may learn from other workers over the broker's events: nothing. Set here, not on
# each command line, so that no way of starting a worker turns it back on.
_QUIET = {"without_mingle": True, "without_gossip": True, "without_heartbeat": True}


class Consumer(CeleryConsumer):
    """Every worker's consumer (CELERY_WORKER_CONSUMER): no mingle (it asks every worker over
    remote control at start), no gossip (it consumes every worker's events, and an election
    carried by events makes the winner send any task it names), no heartbeat events. With
    worker events and remote control off (settings_shared) a worker publishes and subscribes
    to nothing on the broker: it only consumes its queues."""

    def __init__(self, *args: Any, worker_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        for name in _QUIET:
            kwargs.pop(name, None)
        super().__init__(*args, worker_options={**(worker_options or {}), **_QUIET}, **kwargs)

"""The Celery app. Settings come from Django's settings under the CELERY_ namespace."""

import logging
import os
import time
from typing import Any

from celery import Celery
from celery import Task as CeleryTask
from celery.worker.consumer import Consumer as CeleryConsumer
from celery.worker.request import Request as CeleryRequest
from kombu.transport import virtual

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")

log = logging.getLogger("controlpanel.celery")
# How long a worker keeps acknowledging a finished task while the broker is away before it
# leaves the message to come back after the visibility timeout (where it finds its row ended).
ACK_RETRY_S = 300.0

app = Celery("controlpanel", task_cls="controlpanel.celery:Task")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# What a worker may learn from other workers over the broker's events: nothing. Set here, not on
# each command line, so that no way of starting a worker turns it back on.
_QUIET = {"without_mingle": True, "without_gossip": True, "without_heartbeat": True}
# A message sent for a row tries the broker for a second or so, then leaves it to its caller.
SEND_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5}


def send_for_row(task: str, *, queue: str, key: str, pk: object) -> None:
    """Send the task named `task` (by name: the sender never imports the task's module) for one
    row: the row's id goes as the keyword argument `key` and is the message's task id too. Raises
    what the broker raises while it is away; each caller says on its row what that means."""
    app.send_task(task, kwargs={key: str(pk)}, queue=queue, task_id=str(pk), retry_policy=SEND_RETRY)


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


def acknowledge(message: Any, errors: tuple[type[BaseException], ...], retry_s: float = ACK_RETRY_S) -> bool:
    """Acknowledge `message`, again and again while the broker is away (the Redis transport's
    acknowledgement is two deletes, which a reconnected client makes as well as the first).
    False after `retry_s`: the message is then released here only, for Redis to hand it back
    after the visibility timeout (its task then finds its row taken and does nothing)."""
    deadline = time.monotonic() + retry_s
    pause = 0.5
    while True:
        try:
            message.ack()
            return True
        except errors as exc:
            if time.monotonic() + pause > deadline:
                log.error("could not acknowledge task message %s (%s): left for redelivery", message.delivery_tag, exc)
                qos = getattr(message.channel, "qos", None)
                if isinstance(qos, virtual.QoS):  # free this worker's prefetch slot, or it never consumes again
                    virtual.QoS.ack(qos, message.delivery_tag)
                return False
            log.warning("the broker is away (%s): acknowledging task message %s again in %.1f s", exc,
                        message.delivery_tag, pause)  # fmt: skip
            time.sleep(pause)
            pause = min(pause * 2, 5.0)


class Request(CeleryRequest):  # type: ignore[misc]
    """A task's message in a worker. acks_late and a broker lost while the task ran: the
    acknowledgement at its end failed, was logged and was forgotten (Celery's default), which
    left the message holding the worker's only prefetch slot: the worker never took another
    task, nor noticed that the broker had come back. Here it is acknowledged once the broker is
    back (docs/architecture.md, "Tasks and acknowledgements")."""

    def acknowledge(self) -> None:
        if not self.acknowledged:
            acknowledge(self._message, tuple(self._connection_errors) or (OSError,))
            self.acknowledged = True


class Task(CeleryTask):  # type: ignore[misc]
    """Every task of this app: its messages are handled by `Request` in a worker."""

    Request = "controlpanel.celery:Request"

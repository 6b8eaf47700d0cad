"""`python manage.py agent [--name NAME]`: a GPU host's agent, in the foreground.

It registers (or refreshes) the host from a real probe, marks operations a previous worker
left running as lost, reconciles what the host really serves, then runs: the Celery worker
bound to the host's own queue (`host.<name>`, one task at a time), a heartbeat with the
engine's state and metrics, GPU telemetry, and the engine watchdog.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import httpx
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from controlpanel.celery import app
from controlpanel.context import change_context
from deployments.host_ops import engine_state, launch_spec_for, reconcile, supervisor_for
from deployments.models import DeploymentRevision
from deployments.services.operations import operations_mark_lost
from hardware.agent_probe import local_host_name, probe_local
from hardware.models import Host
from hardware.services import host_heartbeat, host_probe_record, telemetry_record

log = logging.getLogger("controlpanel.agent")


class Command(BaseCommand):
    help = "Run this GPU host's agent: Celery worker on host.<name>, heartbeat, telemetry, watchdog."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default=None, help="host name (default: this machine's hostname)")
        parser.add_argument("--address", default="127.0.0.1", help="where the panel reaches this host's engines")
        parser.add_argument("--no-watchdog", action="store_true")
        parser.add_argument("--no-telemetry", action="store_true")
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["name"] or local_host_name()
        with change_context("agent"):
            facts, inventory = probe_local()
            facts["address"] = options["address"]
            host = host_probe_record(name=name, facts=facts, inventory=inventory)
            lost = operations_mark_lost(
                host=host,
                worker_gone=True,
                reason="the host's worker stopped in the middle of this operation (it restarted since)",
            )
            state = reconcile(host)
        self.stdout.write(
            f"Agent for {host.name}: queue {host.queue}, {host.gpus.count()} GPU(s), "
            f"engine {'running ' + str(state.get('revision_label')) if state['running'] else 'stopped'}"
            + (f", {len(lost)} interrupted operation(s) marked lost" if lost else "")
        )
        stop = threading.Event()
        loops = [threading.Thread(target=self._heartbeat, args=(host.pk, stop), daemon=True, name="heartbeat")]
        if host.nvml_available and not options["no_telemetry"]:
            loops.append(threading.Thread(target=self._telemetry, args=(host.pk, stop), daemon=True, name="telemetry"))
        for thread in loops:
            thread.start()
        watchdog = None if options["no_watchdog"] else self._watchdog(host)
        try:
            worker = app.Worker(
                queues=[host.queue],
                concurrency=1,
                pool="solo",
                hostname=f"agent@{host.name}",
                loglevel=options["loglevel"],
                prefetch_multiplier=1,
                without_mingle=True,
                without_gossip=True,
            )
            worker.start()
        finally:
            stop.set()
            if watchdog is not None:
                watchdog.stop(timeout=5)

    def _heartbeat(self, host_pk: int, stop: threading.Event) -> None:
        host = Host.objects.get(pk=host_pk)
        sup = supervisor_for(host.name)
        while True:
            try:
                state = engine_state(sup)
                host_heartbeat(host=host, engine_state=state, engine_metrics=self._metrics(state))
            except Exception:  # noqa: BLE001 - a heartbeat must survive a database blip
                log.exception("heartbeat failed")
            finally:
                close_old_connections()
            if stop.wait(settings.AGENT_HEARTBEAT_S):
                return

    def _metrics(self, state: dict[str, Any]) -> dict[str, Any]:
        """The engine's own metrics in the common shape, when it runs and exposes them."""
        if not state.get("running") or not state.get("revision_id"):
            return {}
        revision = DeploymentRevision.objects.filter(pk=state["revision_id"]).select_related("model_variant").first()
        if revision is None:
            return {}
        from deployments.engines.registry import get_adapter

        spec = launch_spec_for(revision)
        if not spec.metrics_url:
            return {}
        try:
            text = httpx.get(spec.metrics_url, timeout=3.0).text
        except httpx.HTTPError:
            return {}
        metrics = get_adapter(revision.engine).parse_metrics(text)
        return {k: v for k, v in metrics.__dict__.items() if k != "raw"}

    def _telemetry(self, host_pk: int, stop: threading.Event) -> None:
        from hardware.probes.nvml import nvml_session, read_samples

        host = Host.objects.get(pk=host_pk)
        with nvml_session() as lib:
            while not stop.wait(settings.TELEMETRY_INTERVAL_S):
                try:
                    telemetry_record(host=host, samples=[s.to_dict() for s in read_samples(lib)])
                except Exception:  # noqa: BLE001
                    log.exception("telemetry failed")
                finally:
                    close_old_connections()

    def _watchdog(self, host: Host) -> Any:
        from hardware.runtime.watchdog import Watchdog

        sup = supervisor_for(host.name)

        def spec_provider() -> Any:
            try:
                record = sup.status()
                if not record.revision_id:
                    return None
                revision = DeploymentRevision.objects.select_related("model_variant", "host").get(pk=record.revision_id)
                return launch_spec_for(revision)
            finally:
                close_old_connections()

        def on_event(event: Any) -> None:
            if event.kind in ("restarted", "restart_failed", "gave_up"):
                log.warning("watchdog on %s: %s", host.name, event.message)
                from deployments.services.audit import audit_record

                try:
                    audit_record(action=f"watchdog.{event.kind}", summary=event.message[:300], host=host, actor=None)
                finally:
                    close_old_connections()

        dog = Watchdog(
            sup,
            spec_provider,
            interval=settings.WATCHDOG_INTERVAL_S,
            timeout=settings.WATCHDOG_TIMEOUT_S,
            failure_threshold=settings.WATCHDOG_FAILURES,
            max_restarts=settings.WATCHDOG_MAX_RESTARTS,
            window=settings.WATCHDOG_WINDOW_S,
            on_event=on_event,
        )
        dog.start()
        return dog

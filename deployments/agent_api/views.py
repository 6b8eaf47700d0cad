"""The agent API's endpoints: one service or selector each, for the token's own host only."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse

from deployments.choices import ACTIVE_STATES
from deployments.host_serving import revision_launch
from deployments.models import DeploymentRevision, Operation
from deployments.services import host_reports
from deployments.services.engine_logs import engine_log_append
from deployments.services.front_door import front_door_document, front_door_report
from deployments.services.measured_memory import measured_memory_record
from deployments.services.operations import operation_progress
from hardware.models import Host
from hardware.services import host_probe_record, telemetry_record, usage_record
from serving.agent_reports import Hello, ProbeAnswer
from serving.host_events import HOST_REPORTED

from . import bodies
from .auth import MAX_BODY, host_endpoint, problem
from .orders import operation_brief, operation_order

NOT_YOURS = "No such operation on this host."


def _own_operation(host: Host, op_id: UUID) -> Operation | None:
    return Operation.objects.select_related("host").filter(pk=op_id, host=host).first()


def _refused(exc: Exception) -> JsonResponse:
    message = "; ".join(exc.messages) if isinstance(exc, ValidationError) else f"{type(exc).__name__}: {exc}"
    return problem(400, message[:2000])


@host_endpoint(("GET",))
def hello(request: HttpRequest, host: Host, body: dict[str, Any]) -> HttpResponse:
    """Who this token is: the host's name and queue."""
    return JsonResponse(Hello(host=host.name, queue=host.queue).to_dict())


@host_endpoint(("POST",))
def register(request: HttpRequest, host: Host, body: dict[str, Any]) -> HttpResponse:
    try:
        report = bodies.registration(body)
        answer = host_reports.host_register(
            host=host,
            facts=dict(report.facts),
            inventory=dict(report.inventory),
            engine_state=dict(report.engine_state),
        )
    except (ValidationError, KeyError, TypeError, ValueError) as exc:
        return _refused(exc)
    return JsonResponse(answer.to_dict())


@host_endpoint(("POST",))
def probe(request: HttpRequest, host: Host, body: dict[str, Any]) -> HttpResponse:
    try:
        report = bodies.host_probe(body)
        host = host_probe_record(name=host.name, facts=dict(report.facts), inventory=dict(report.inventory))
    except (ValidationError, KeyError, TypeError, ValueError) as exc:
        return _refused(exc)
    return JsonResponse(ProbeAnswer(gpus=host.gpus.count(), mismatches=tuple(host.probe_mismatches)).to_dict())


@host_endpoint(("POST",))
def heartbeat(request: HttpRequest, host: Host, body: dict[str, Any]) -> HttpResponse:
    try:
        beat = bodies.heartbeat(body)
        metrics = dict(beat.engine_metrics) if beat.engine_metrics is not None else None
        cached = dict(beat.cached_builds) if beat.cached_builds is not None else None
        host_reports.host_alive(
            host=host, engine_state=dict(beat.engine_state), engine_metrics=metrics, cached_builds=cached
        )
    except (ValidationError, TypeError, ValueError) as exc:
        return _refused(exc)
    return JsonResponse({"ok": True})


@host_endpoint(("POST",), max_body=MAX_BODY)
def telemetry(request: HttpRequest, host: Host, body: dict[str, Any]) -> HttpResponse:
    try:
        report = bodies.telemetry(body)
        gpu = telemetry_record(host=host, samples=[dict(s) for s in report.gpu_samples])
        engine = host_reports.engine_samples_record(host=host, samples=[dict(s) for s in report.engine_samples])
        usage = usage_record(host=host, samples=[dict(s) for s in report.host_samples])
        memory = report.memory
        held = {"memory": measured_memory_record(host=host, report=memory)} if memory is not None else {}
    except (ValidationError, TypeError, ValueError, OverflowError) as exc:
        return _refused(exc)
    return JsonResponse({"gpu_samples": gpu, "engine_samples": engine, "host_samples": usage, **held})


@host_endpoint(("POST",))
def event(request: HttpRequest, host: Host, body: dict[str, Any]) -> HttpResponse:
    """A watchdog's `{kind, message}`, or what the agent reports of itself (HostEventReport)."""
    try:
        if body.get("kind") in HOST_REPORTED:
            host_reports.host_event_report(host=host, report=bodies.host_event(body))
        else:
            event = bodies.event(body)
            host_reports.watchdog_event_record(host=host, kind=event.kind, message=event.message)
    except ValidationError as exc:
        return _refused(exc)
    return JsonResponse({"ok": True})


@host_endpoint(("POST",), max_body=4 * 1024 * 1024)  # 256 KiB of log a report, JSON-escaped
def engine_log(request: HttpRequest, host: Host, body: dict[str, Any]) -> HttpResponse:
    """Lines of the engine's log; answers how far into the host's file the panel has it."""
    try:
        run = engine_log_append(host=host, chunk=bodies.engine_log(body))
    except ValidationError as exc:
        return _refused(exc)
    return JsonResponse({"received": run.received})


@host_endpoint(("GET",))
def launch(request: HttpRequest, host: Host, body: dict[str, Any], revision_id: int) -> HttpResponse:
    revision = DeploymentRevision.objects.select_related("host", "model_variant").filter(pk=revision_id, host=host)
    found = revision.first()
    if found is None:
        return problem(404, "No such revision on this host.")
    return JsonResponse(revision_launch(found, host_bound=True).to_dict())


@host_endpoint(("GET",))
def operations(request: HttpRequest, host: Host, body: dict[str, Any]) -> HttpResponse:
    active = Operation.objects.filter(host=host, state__in=ACTIVE_STATES).order_by("created_at")
    return JsonResponse({"operations": [operation_brief(op) for op in active]})


@host_endpoint(("POST",))
def begin(request: HttpRequest, host: Host, body: dict[str, Any], op_id: UUID) -> HttpResponse:
    if _own_operation(host, op_id) is None:
        return problem(404, NOT_YOURS)
    try:
        name = bodies.worker(body.get("worker"), host.name)
    except ValidationError as exc:
        return _refused(exc)
    op = host_reports.operation_host_begin(host=host, op_id=op_id, worker=name)
    if op is None:
        found = _own_operation(host, op_id)
        return JsonResponse({"begun": False, "state": found.state if found else "gone"})
    return JsonResponse({"begun": True, "order": operation_order(op)})


@host_endpoint(("POST",))
def progress(request: HttpRequest, host: Host, body: dict[str, Any], op_id: UUID) -> HttpResponse:
    if _own_operation(host, op_id) is None:
        return problem(404, NOT_YOURS)
    try:
        report = bodies.progress(body)
        cancelled = operation_progress(op_id=op_id, stage=report.stage, progress=report.progress, log=report.log)
    except ValidationError as exc:
        return _refused(exc)
    return JsonResponse({"cancelled": cancelled})


@host_endpoint(("POST",), max_body=MAX_BODY)
def finish(request: HttpRequest, host: Host, body: dict[str, Any], op_id: UUID) -> HttpResponse:
    op = _own_operation(host, op_id)
    if op is None:
        return problem(404, NOT_YOURS)
    try:
        end = bodies.finish(body)
        recorded = host_reports.operation_host_finish(
            op=op,
            state=end.state,
            result=dict(end.result),
            error=end.error,
            benchmark=dict(end.benchmark) if end.benchmark is not None else None,
            install=end.install,
        )
    except (ValidationError, KeyError, TypeError, ValueError) as exc:
        return _refused(exc)
    return JsonResponse({"recorded": recorded})


def _etag_matches(request: HttpRequest, version: str) -> bool:
    sent = request.headers.get("If-None-Match", "")
    return any(tag.strip().removeprefix("W/").strip('"') == version for tag in sent.split(",") if tag.strip())


@host_endpoint(("GET",))
def serving(request: HttpRequest, host: Host, body: dict[str, Any]) -> HttpResponse:
    """The host's front-door document (PROTOCOL.md); 304 when the agent has this version."""
    document = front_door_document(host)
    version = document.version
    response = HttpResponse(status=304) if _etag_matches(request, version) else JsonResponse(document.to_dict())
    response["ETag"] = f'"{version}"'
    response["Cache-Control"] = "no-store"  # it carries the host's engine keys
    return response


@host_endpoint(("POST",))
def serving_report(request: HttpRequest, host: Host, body: dict[str, Any]) -> HttpResponse:
    try:
        report = bodies.serving_report(body)
        front_door_report(
            host=host,
            version=report.version or "",
            bind=report.bind,
            state=[row.to_dict() for row in report.state],
            usage=report.usage,
            refused=report.refused,
        )
    except (ValidationError, TypeError, ValueError) as exc:
        return _refused(exc)
    return HttpResponse(status=204)

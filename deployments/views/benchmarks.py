"""Benchmark pages: start a run, watch it, results with plots, the JSON export, compare runs.

A run is started against what a host serves (its active revision); the service records an
Operation and enqueues it on the host's queue, the host's agent creates the BenchmarkRun
when it starts measuring. So the POST redirects to a progress page keyed by the operation,
which sends the browser on to the results once the run is recorded.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect

from controlpanel.params import MAX_INT, int_param, parse_int, text_param
from controlpanel.roles import OPERATOR, VIEWER, role_required
from core.http import by_method, is_partial, polled
from deployments import plots, presenters
from deployments.choices import OperationKind
from deployments.forms import BenchmarkForm
from deployments.models import BenchmarkRun, DeploymentRevision, Operation, active_revision_of
from deployments.selectors.benchmarks import previous_benchmark_run
from deployments.services.benchmarks import benchmark_compare, benchmark_export, benchmark_request, benchmark_summary
from hardware.models import Host
from hardware.selectors import offline_reason
from serving.benchmarking.profiles import PROFILES

from .lookups import host_or_404

RUNS_LISTED = 100


# --- start -------------------------------------------------------------------------------------


def _new_context(host: Host, form: BenchmarkForm, errors: list[str]) -> dict[str, Any]:
    try:
        number = parse_int(str(form["revision"].value() or ""), name="revision", minimum=1)
    except ValueError:  # absent or malformed (the form says which): the served revision
        number = None
    revision = None
    if number is not None:
        revision = host.revisions.select_related("model_variant").filter(number=number).first()
    return {
        "host": host,
        "form": form,
        "errors": errors,
        "revision": revision or active_revision_of(host),
        "profiles": PROFILES,
        "field_names": ("concurrency", "input_tokens", "output_tokens", "requests"),
        "offline_reason": offline_reason(host),
    }


@require_GET
@role_required(VIEWER)
def benchmark_new_page(request: HttpRequest, host: str) -> HttpResponse:
    host_obj = host_or_404(host, with_model=True)
    initial: dict[str, Any] = {"profile": "quick"}
    number = int_param(request.GET, "revision", minimum=1)
    if number is not None:
        initial["revision"] = number
    form = BenchmarkForm(initial=initial)
    return render(request, "deployments/benchmark_new.html", _new_context(host_obj, form, []))


@require_POST
@role_required(OPERATOR)
def benchmark_start(request: HttpRequest, host: str) -> HttpResponse:
    host_obj = host_or_404(host, with_model=True)
    form = BenchmarkForm(request.POST)
    errors: list[str] = []
    if form.is_valid():
        revision: DeploymentRevision | None = None
        number = form.cleaned_data.get("revision")
        if number is not None:
            revision = host_obj.revisions.filter(number=number).first()
            if revision is None:
                errors.append(f"{host_obj.name} has no revision r{number}.")
        if not errors and offline_reason(host_obj):  # nobody would run it: say why, queue nothing
            errors.append(offline_reason(host_obj))
        if not errors:
            try:
                op = benchmark_request(
                    host=host_obj,
                    profile=form.cleaned_data["benchmark_profile"],
                    revision=revision,
                    actor=request.user,
                )
            except ValidationError as exc:  # no active revision, not the served revision, host busy
                errors.extend(presenters.validation_messages(exc))
            else:
                url = reverse("deployments:benchmark_progress", args=[op.pk])
                return HttpResponseClientRedirect(url) if is_partial(request) else redirect(url)
    response = render(request, "deployments/benchmark_new.html", _new_context(host_obj, form, errors))
    response.status_code = 400  # the form with its errors beside the fields
    return response


benchmark_new = by_method(get=benchmark_new_page, post=benchmark_start)


# --- progress ----------------------------------------------------------------------------------


def _benchmark_op(pk: Any) -> Operation:
    op = (
        Operation.objects.select_related("host", "revision", "requested_by")
        .filter(pk=pk, kind=OperationKind.BENCHMARK)
        .first()
    )
    if op is None:
        raise Http404("No such benchmark.")
    return op


def _progress_context(op: Operation, run: BenchmarkRun | None) -> dict[str, Any]:
    # The log's last lines, repeated polls folded into one line with a count (display only).
    return {"op": op, "run": run, "log_lines": presenters.fold_log((op.log or "")[-4000:])}


def _run_for(op: Operation) -> BenchmarkRun | None:
    return BenchmarkRun.objects.filter(operation=op).first()


@require_GET
@role_required(VIEWER)
def benchmark_progress(request: HttpRequest, pk: str) -> HttpResponse:
    op = _benchmark_op(pk)
    run = _run_for(op)
    if run is not None and not op.is_active:
        return redirect("deployments:benchmark_detail", pk=run.pk)
    return render(request, "deployments/benchmark_progress.html", _progress_context(op, run))


@require_GET
@role_required(VIEWER)
def benchmark_progress_status(request: HttpRequest, pk: str) -> HttpResponse:
    """The progress fragment. When the run ends: on to its results, or 286 with the error."""
    op = _benchmark_op(pk)
    run = _run_for(op)
    if not op.is_active and run is not None:
        return HttpResponseClientRedirect(reverse("deployments:benchmark_detail", args=[run.pk]))
    return polled(request, "deployments/_benchmark_progress.html", _progress_context(op, run), going=op.is_active)


# --- results -----------------------------------------------------------------------------------


def _run_or_404(pk: int) -> BenchmarkRun:
    run = (
        BenchmarkRun.objects.select_related("revision__host", "revision__model_variant", "operation")
        .filter(pk=pk)
        .first()
    )
    if run is None:
        raise Http404("No such benchmark run.")
    return run


def _levels(run: BenchmarkRun) -> list[dict[str, Any]]:
    results = run.results if isinstance(run.results, dict) else {}
    return [lv for lv in results.get("levels") or [] if isinstance(lv, dict)]


def _raw(run: BenchmarkRun) -> list[dict[str, Any]]:
    return [r for r in run.raw if isinstance(r, dict)] if isinstance(run.raw, list) else []


def _commands(run: BenchmarkRun) -> tuple[dict[str, list[str]], str]:
    """Equivalent command lines as shell text per tool, or why they cannot be given."""
    import shlex

    try:
        commands = benchmark_export(run)["equivalent_commands"]
    except (KeyError, TypeError, ValueError) as exc:
        return {}, f"The stored profile cannot be replayed: {exc}"
    return {tool: [shlex.join(argv) for argv in argvs] for tool, argvs in commands.items()}, ""


def safe_headline(results: Any) -> presenters.Headline:
    """Headline figures; a stored value of the wrong shape gives blanks, never a crash."""
    try:
        return presenters.headline(results)
    except (AttributeError, TypeError, ValueError):
        return presenters.Headline()


def _summary(run: BenchmarkRun) -> dict[str, Any]:
    try:
        return benchmark_summary(run)
    except (AttributeError, TypeError, ValueError):
        return {"levels": [], "reason": "The stored results cannot be read."}


@require_GET
@role_required(VIEWER)
def benchmark_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = _run_or_404(pk)
    levels, raw = _levels(run), _raw(run)
    results = run.results if isinstance(run.results, dict) else {}
    commands, commands_error = _commands(run)
    charts = {}
    if levels:
        charts = {
            "throughput": plots.throughput_chart({"this run": levels}),
            "ttft": plots.latency_chart(levels, "ttft_ms"),
            "tpot": plots.latency_chart(levels, "tpot_ms"),
            "e2e": plots.latency_chart(levels, "e2e_ms"),
            "scatter": plots.request_scatter(raw, levels),
            "timeline": plots.request_timeline(raw, levels),
        }
    others = (
        BenchmarkRun.objects.filter(revision__host=run.revision.host)
        .exclude(pk=run.pk)
        .select_related("revision")
        .order_by("-created_at")[:50]
    )
    op = run.operation
    return render(
        request,
        "deployments/benchmark_detail.html",
        {
            "run": run,
            "host": run.revision.host,
            "revision": run.revision,
            "op": op,
            "running": op is not None and op.is_active,
            "levels": levels,
            "summary": _summary(run),
            "results": results,
            "headline": safe_headline(results),
            "charts": charts,
            "commands": commands,
            "commands_error": commands_error,
            "others": others,
            "profile_json": json.dumps(run.profile, indent=2, sort_keys=True, default=str),
        },
    )


@require_GET
@role_required(VIEWER)
def benchmark_export_view(request: HttpRequest, pk: int) -> HttpResponse:
    run = _run_or_404(pk)
    try:
        data = benchmark_export(run)
    except (KeyError, TypeError, ValueError):
        # The stored profile cannot be replayed: export everything else.
        data = {"host": run.revision.host.name, "revision": run.revision.number, "profile": run.profile}
        data |= {"status": run.status, "results": run.results, "raw": run.raw, "equivalent_commands": {}}
    body = json.dumps(data, indent=2, default=str)
    response = HttpResponse(body, content_type="application/json")
    filename = f"benchmark-{run.revision.host.name}-r{run.revision.number}-{run.pk}.json"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _completed(run: BenchmarkRun) -> int:
    """The run's sample size: requests that completed, over its levels."""
    counts = (level.get("completed") for level in _levels(run) if isinstance(level, dict))
    return sum(c for c in counts if isinstance(c, int) and not isinstance(c, bool))


@require_GET
@role_required(VIEWER)
def benchmark_compare_view(request: HttpRequest, a: int, b: int) -> HttpResponse:
    run_a, run_b = _run_or_404(a), _run_or_404(b)
    label_a = f"A: {run_a.revision.host.name} r{run_a.revision.number} #{run_a.pk}"
    label_b = f"B: {run_b.revision.host.name} r{run_b.revision.number} #{run_b.pk}"
    try:
        rows = benchmark_compare(run_a, run_b)
    except (AttributeError, TypeError, ValueError):
        rows = []
    chart = plots.throughput_chart({label_a: _levels(run_a), label_b: _levels(run_b)}, total=False)
    return render(
        request,
        "deployments/benchmark_compare.html",
        {
            "a": run_a,
            "b": run_b,
            "label_a": label_a,
            "label_b": label_b,
            "rows": rows,
            "chart": chart,
            "requests_a": _completed(run_a),
            "requests_b": _completed(run_b),
            "headline_a": safe_headline(run_a.results),
            "headline_b": safe_headline(run_b.results),
        },
    )


# --- a host's runs (and the compare picker) ---------------------------------------------------------


@require_GET
@role_required(VIEWER)
@vary_on_headers("HX-Request")
def benchmark_list(request: HttpRequest, host: str) -> HttpResponse:
    host_obj = host_or_404(host, with_model=True)
    runs = list(
        BenchmarkRun.objects.filter(revision__host=host_obj)
        .select_related("revision")
        .order_by("-created_at")[:RUNS_LISTED]
    )
    errors: list[str] = []
    a, b = text_param(request.GET, "a"), text_param(request.GET, "b")
    if a or b:
        try:
            run_a, run_b = (parse_int(v, name=n, minimum=1, maximum=MAX_INT) for n, v in (("A", a), ("B", b)))
        except ValueError:
            errors.append("Pick two runs to compare (A and B).")
        else:
            if run_a == run_b:
                errors.append("Pick two different runs.")
            elif BenchmarkRun.objects.filter(pk__in=[run_a, run_b]).count() != 2:
                errors.append("One of those runs does not exist.")
            else:
                return redirect("deployments:benchmark_compare", a=run_a, b=run_b)
    if not (a or b):
        a, b = _compare_defaults(runs)
    rows = [(r, safe_headline(r.results)) for r in runs]
    response = render(
        request,
        "deployments/benchmark_list.html",
        {"host": host_obj, "rows": rows, "errors": errors, "a": a, "b": b, "offline_reason": offline_reason(host_obj)},
    )
    if errors:
        response.status_code = 400
    return response


def _compare_defaults(runs: list[BenchmarkRun]) -> tuple[str, str]:
    """The pair the picker starts on: the newest completed run as B, and as A the run a new one is
    held against (previous_benchmark_run: the same profile, the revision before), else the completed
    run just before it; "" where there is none."""
    done = [run for run in runs if run.status == "completed"]
    if len(done) < 2:
        return "", ""
    newest = done[0]
    before = previous_benchmark_run(newest) or done[1]
    return str(before.pk), str(newest.pk)


urlpatterns = [
    path("hosts/<slug:host>/benchmarks/", benchmark_list, name="benchmark_list"),
    path("hosts/<slug:host>/benchmarks/new/", benchmark_new, name="benchmark_new"),
    path("benchmarks/operations/<uuid:pk>/", benchmark_progress, name="benchmark_progress"),
    path("benchmarks/operations/<uuid:pk>/status/", benchmark_progress_status, name="benchmark_progress_status"),
    path("benchmarks/<int:pk>/", benchmark_detail, name="benchmark_detail"),
    path("benchmarks/<int:pk>/export.json", benchmark_export_view, name="benchmark_export"),
    path("benchmarks/compare/<int:a>/<int:b>/", benchmark_compare_view, name="benchmark_compare"),
]

"""Revision pages: history, one revision, a new revision (with the live planner), comments,
and the switch to a revision (confirmation with findings and the diff from the active one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import path, reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect

from controlpanel.params import int_param, text_param
from controlpanel.roles import OPERATOR, VIEWER, role_required
from core.http import by_method, form_save, is_partial
from deployments import presenters, selectors
from deployments.choices import Engine, ModelFormat
from deployments.engine_installs import host_binary
from deployments.forms import CommentForm, RevisionForm, SwitchForm
from deployments.models import DeploymentRevision, active_revision_id_of, active_revision_of
from deployments.runtime_bridge import host_facts, spec_for_values
from deployments.selectors.memory import revision_memory
from deployments.selectors.revision_views import changes_between
from deployments.services.gates import gate_params
from deployments.services.host_models import download_active, downloadable, host_model_of
from deployments.services.operations import HostBusyError
from deployments.services.preflight import panel_preflight, ram_check
from deployments.services.revisions import comment_create, engine_default_port, revision_derive
from deployments.services.serving_set import free_port
from deployments.services.switch import PlanRefused, switch_request
from hardware.models import Host
from hardware.review import ChangeRequested
from hardware.selectors import offline_reason
from schedules.choices import ChangeKind
from schedules.forms import WhenForm
from schedules.services import change_schedule
from serving.engines.base import EngineConfigError
from serving.engines.registry import get_adapter
from serving.launch import launch
from serving.planner import PlanInputError

from .lookups import host_or_404, revision_or_404
from .playground import playground_context

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

FILTER_KEYS = ("model", "engine", "author", "tag")
HISTORY_LIMIT = 200


# --- history -----------------------------------------------------------------------------------


@require_GET
@role_required(VIEWER)
def revision_list(request: HttpRequest, host: str) -> HttpResponse:
    host_obj = host_or_404(host)
    filters = {k: text_param(request.GET, k) for k in FILTER_KEYS}
    revisions = list(selectors.revision_history(host=host_obj, filters=filters)[:HISTORY_LIMIT])
    authors = (
        get_user_model()
        .objects.filter(deploymentrevision__host=host_obj)
        .distinct()
        .order_by("username")
        .values_list("username", flat=True)
    )
    return render(
        request,
        "deployments/revision_list.html",
        {
            "host": host_obj,
            "entries": presenters.history_entries(revisions),
            "filters": filters,
            "authors": list(authors),
            "engines": Engine.choices,
            "limit": HISTORY_LIMIT,
        },
    )


# --- one revision ------------------------------------------------------------------------------


def _detail_context(request: HttpRequest, revision: DeploymentRevision, **extra: Any) -> dict[str, Any]:
    report, report_error = presenters.report_for_revision(revision)
    runs = revision.benchmark_runs.order_by("-created_at")
    return {
        "revision": revision,
        "host": revision.host,
        "is_active": active_revision_id_of(revision.host) == revision.pk,
        "launch": presenters.launch_for_revision(revision),
        "report": report,
        "report_error": report_error,
        "memory": revision_memory(revision),
        "benchmarks": presenters.benchmark_rows(runs),
        "switches": presenters.switch_history(revision),
        "comments": revision.comments.select_related("author"),
        "comment_form": extra.pop("comment_form", None) or CommentForm(),
        "imported": (revision.extras or {}).get("ansible"),
        "exports_url": presenters.url_or_none("deployments:revision_exports", revision.host.name, revision.number),
        "offline_reason": offline_reason(revision.host),  # no Switch or Benchmark offered, and why
        **playground_context(request, revision),
        **extra,
    }


@require_GET
@role_required(VIEWER)
def revision_detail(request: HttpRequest, host: str, number: int) -> HttpResponse:
    revision = revision_or_404(host, number)
    return render(request, "deployments/revision_detail.html", _detail_context(request, revision))


@require_POST
@role_required(VIEWER)
def revision_comment(request: HttpRequest, host: str, number: int) -> HttpResponse:
    revision = revision_or_404(host, number)
    form = CommentForm(request.POST)
    saved = form_save(
        form, lambda data: comment_create(revision=revision, body=data["body"], actor=request.user), fallback="body"
    )
    if saved is not None and not is_partial(request):
        return redirect("deployments:revision_detail", host=host, number=number)
    if is_partial(request):
        context = {"revision": revision, "comments": revision.comments.select_related("author")}
        context["comment_form"] = form if saved is None else CommentForm()
        return render(request, "deployments/_comments.html", context)
    return render(request, "deployments/revision_detail.html", _detail_context(request, revision, comment_form=form))


# --- a new revision ----------------------------------------------------------------------------


def _new_context(host: Host, form: RevisionForm, start: DeploymentRevision | None) -> dict[str, Any]:
    return {
        "host": host,
        "form": form,
        "start": start,
        "knob_tables": {
            engine: sorted(getattr(get_adapter(engine), "knobs", {}).values(), key=lambda s: s.name)
            for engine in Engine.values
        },
    }


@require_GET
@role_required(VIEWER)
def revision_new_page(request: HttpRequest, host: str) -> HttpResponse:
    host_obj = host_or_404(host)
    start: DeploymentRevision | None = None
    start_number = int_param(request.GET, "from", minimum=1)
    if start_number is not None:
        start = host_obj.revisions.select_related("model_variant").filter(number=start_number).first()
    elif active_revision_id_of(host_obj):
        start = active_revision_of(host_obj)
    if start is None:
        start = host_obj.revisions.select_related("model_variant").order_by("-number").first()
    first_engine = Engine.LLAMACPP if host_obj.cpu_only else Engine.VLLM
    initial = (
        RevisionForm.initial_from(start) | {"port": free_port(host_obj, start)}  # never a served revision's port
        if start
        else {"engine": first_engine, "port": engine_default_port(first_engine)}
    )
    form = RevisionForm(host=host_obj, initial=initial)
    return render(request, "deployments/revision_new.html", _new_context(host_obj, form, start))


@require_POST
@role_required(OPERATOR)
def revision_create_view(request: HttpRequest, host: str) -> HttpResponse:
    host_obj = host_or_404(host)
    form = RevisionForm(request.POST, host=host_obj)
    revision = form_save(form, lambda data: _derive(host_obj, data, request.user), fallback="knobs")
    if revision is not None:
        url = reverse("deployments:revision_detail", args=[host_obj.name, revision.number])
        messages.success(request, f"Recorded r{revision.number}.")
        return HttpResponseClientRedirect(url) if is_partial(request) else redirect(url)
    start = form.cleaned_data.get("parent") if hasattr(form, "cleaned_data") else None
    return render(request, "deployments/revision_new.html", _new_context(host_obj, form, start))


def _derive(host: Host, data: dict[str, Any], actor: AbstractUser | None) -> DeploymentRevision:
    """The form's revision, made from its parent by the one rule (services.revisions.revision_derive):
    the form carries every field, so each replaces the parent's."""
    return revision_derive(
        host=host,
        parent=data["parent"],
        changes={
            "engine": data["engine"],
            "version": data["engine_version"],
            "model": data["model_variant"],
            "knobs": data["knobs"],
            "env": data["env"],
            "served_name": data["served_name"],
            "port": data["port"],
            "api_key_secret": data["api_key_secret"],
            "hf_token_secret": data["hf_token_secret"],
        },
        tag=data["tag"],
        message=data["message"],
        actor=actor,
    )


revision_new = by_method(get=revision_new_page, post=revision_create_view)


def _preview(request: HttpRequest, host: str, data: QueryDict) -> HttpResponse:
    host_obj = host_or_404(host)
    context: dict[str, Any] = {"report": None, "report_error": "", "errors": [], "launch": None, "memory": None}
    form = RevisionForm(data, host=host_obj, preview=True)
    if not data or not data.get("model_variant"):
        context["report_error"] = "Choose a model and an engine to see how it fits."
        return render(request, "deployments/_planner_report.html", context)
    if not form.is_valid():
        context["errors"] = [
            f"{form.fields[k].label or k}: {m}" if k in form.fields else m for k, ms in form.errors.items() for m in ms
        ]
        return render(request, "deployments/_planner_report.html", context)
    values = form.cleaned_data
    # What both the planner and the engine's command line read.
    settings = {k: values[k] for k in ("engine", "engine_version", "knobs", "env")} | {"model": values["model_variant"]}
    context["report"], context["report_error"] = presenters.report_for_values(host=host_obj, **settings)
    if context["report"] is not None:  # the switch preflight's own RAM check, as you type
        context["memory"] = ram_check(host_obj, values["model_variant"], context["report"])
    try:
        spec = spec_for_values(
            engine=values["engine"],
            engine_version=values["engine_version"].strip(),
            model=values["model_variant"],
            knobs=values["knobs"],
            env=values["env"],
            served_name=values["served_name"].strip(),
            port=values["port"] or engine_default_port(values["engine"]),
            api_key_secret=values.get("api_key_secret") or "",
        )
        binary = host_binary(host_obj, spec.engine, spec.version)
        made = launch(spec, host_facts(host_obj, model=values["model_variant"], binary=binary))
        context["launch"] = presenters.Launch(argv=made.masked_argv(), env=made.masked_env())
    except (EngineConfigError, PlanInputError) as exc:
        field = getattr(exc, "field", None)
        context["errors"].append(f"{field + ': ' if field else ''}{exc}")
    return render(request, "deployments/_planner_report.html", context)


@require_GET
@role_required(VIEWER)
def revision_preview_get(request: HttpRequest, host: str) -> HttpResponse:
    return _preview(request, host, request.GET)


@require_POST
@role_required(VIEWER)
def revision_preview_post(request: HttpRequest, host: str) -> HttpResponse:
    return _preview(request, host, request.POST)


revision_preview = by_method(get=revision_preview_get, post=revision_preview_post)


# --- switch ------------------------------------------------------------------------------------


def _switch_context(
    revision: DeploymentRevision, form: SwitchForm, errors: list[str], when: WhenForm | None = None
) -> dict[str, Any]:
    report, report_error = presenters.report_for_revision(revision)
    active = active_revision_of(revision.host)
    preflight = panel_preflight(revision, report)

    variant = revision.model_variant
    weights_missing = (
        variant.format != ModelFormat.OLLAMA
        and not downloadable(variant)
        and host_model_of(host=revision.host, variant=variant) is None
        and download_active(host=revision.host, variant=variant) is None
    )
    return {
        "weights_missing": weights_missing,
        "revision": revision,
        "host": revision.host,
        "active": active,
        "changes": changes_between(active, revision) if active and active.pk != revision.pk else None,
        "report": report,
        "report_error": report_error,
        "preflight": preflight,
        "preflight_problems": [c for c in preflight if c.status == "fail"],
        "form": form,
        "errors": errors,
        "when": when,
    }


def _render_switch(request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
    template = "deployments/_switch_confirm.html" if is_partial(request) else "deployments/switch_confirm.html"
    return render(request, template, context)


@require_GET
@role_required(VIEWER)
@vary_on_headers("HX-Request")
def revision_switch_confirm(request: HttpRequest, host: str, number: int) -> HttpResponse:
    revision = revision_or_404(host, number)
    return _render_switch(request, _switch_context(revision, SwitchForm(), []))


@require_POST
@role_required(OPERATOR)
def revision_switch_request(request: HttpRequest, host: str, number: int) -> HttpResponse:
    revision = revision_or_404(host, number)
    form, when = SwitchForm(request.POST), WhenForm(request.POST)
    errors: list[str] = []
    if form.is_valid() and when.is_valid():
        reason, gate = form.cleaned_data["override_reason"], form.cleaned_data["gate"]
        try:
            if later := when.later():  # "schedule it": beat runs the same switch_request when it is due
                params = {"revision": revision.number, "override_reason": reason} | gate_params(gate)
                change = change_schedule(
                    kind=ChangeKind.SWITCH, host=revision.host, params=params, **later, actor=request.user
                )
                messages.success(
                    request, f"Switch to r{revision.number} scheduled for {change.run_at:%Y-%m-%d %H:%M} UTC."
                )
                url = reverse("schedules:list") + f"?host={revision.host.name}"
                return HttpResponseClientRedirect(url) if is_partial(request) else redirect(url)
            op = switch_request(revision=revision, override_reason=reason, gate=gate, actor=request.user)
        except PlanRefused as exc:
            errors.append(
                "The planner found errors."
                + (" An admin may override them with a reason." if not form.cleaned_data["override_reason"] else "")
            )
            context = _switch_context(revision, form, errors)
            context["report"] = exc.report.to_dict()
            return _render_switch(request, context)
        except ChangeRequested as exc:  # a protected host: the switch waits for a review
            messages.info(request, " ".join(exc.messages))
            url = exc.change.get_absolute_url()
            return HttpResponseClientRedirect(url) if is_partial(request) else redirect(url)
        except (HostBusyError, ValidationError) as exc:
            errors.extend(presenters.validation_messages(exc))
        else:
            url = reverse("deployments:operation_detail", args=[op.pk])
            return HttpResponseClientRedirect(url) if is_partial(request) else redirect(url)
    return _render_switch(request, _switch_context(revision, form, errors, when))


revision_switch = by_method(get=revision_switch_confirm, post=revision_switch_request)


urlpatterns = [
    path("hosts/<slug:host>/revisions/", revision_list, name="revision_list"),
    path("hosts/<slug:host>/revisions/new/", revision_new, name="revision_new"),
    path("hosts/<slug:host>/revisions/preview/", revision_preview, name="revision_preview"),
    path("hosts/<slug:host>/revisions/<int:number>/", revision_detail, name="revision_detail"),
    path("hosts/<slug:host>/revisions/<int:number>/comment/", revision_comment, name="revision_comment"),
    path("hosts/<slug:host>/revisions/<int:number>/switch/", revision_switch, name="revision_switch"),
]

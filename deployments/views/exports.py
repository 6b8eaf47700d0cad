"""Exports of a revision (client configs, start script, systemd unit, Ansible group_vars) and the Ansible import."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_POST

from controlpanel.roles import OPERATOR, VIEWER, role_required
from core.http import by_method, form_save
from deployments.forms import AnsibleImportForm
from deployments.models import DeploymentRevision
from deployments.services.exports import VIA, loopback_warning, revision_export, revision_export_targets
from deployments.services.imports import revision_import_ansible
from hardware.models import Host
from serving.exports import ClientTarget, NotExportable, client_exports

from .lookups import revision_or_404


def _client_exports(target: ClientTarget) -> list[dict[str, Any]]:
    """The client configs (opencode, Hermes, Aider, curl, openai) at `target` (the lab router,
    or the host's front door and the revision's alias, or the engine, saying why), with the
    context the server really runs with; the API key is only ever a placeholder. One that cannot
    tell its client the truth carries why instead of a file."""
    return [
        {
            "key": item.key,
            "title": item.title,
            "filename": item.export.filename if item.export else "",
            "content": item.export.content if item.export else "",
            "language": item.export.language if item.export else "",
            "error": item.error,
            "warnings": list(item.warnings),
        }
        for item in client_exports(target)
    ]


def _host_exports(revision: DeploymentRevision) -> list[dict[str, str]]:
    """The start script and the systemd unit, with the executable the host installed."""
    out = []
    for key, title in (("start-script", "Start script"), ("systemd", "systemd unit")):
        try:
            made = revision_export(revision, key)
        except NotExportable as exc:
            out.append({"key": key, "title": title, "filename": "", "content": "", "error": str(exc)})
        else:
            out.append({"key": key, "title": title, "filename": made.filename, "content": made.content, "error": ""})
    return out


@require_GET
@role_required(VIEWER)
def revision_exports(request: HttpRequest, host: str, number: int) -> HttpResponse:
    revision = revision_or_404(host, number)
    targets = revision_export_targets(revision)
    asked = request.GET.get("via")
    target = targets.pick(asked if asked in VIA else None)  # `?via=router|door`; the downloads follow it
    context: dict[str, Any] = {
        "revision": revision,
        "host": revision.host,
        "clients": _client_exports(target),
        "launches": _host_exports(revision),
        "target": target,
        "targets": targets,
        "loopback_warning": loopback_warning(target),
        "via": "router" if target.via_router else "door" if target.via_door else "",
        "ansible": None,
        "ansible_error": "",
        "router_url": settings.ROUTER_URL,  # the lab router's: the same name, whichever host serves it
    }
    try:
        context["ansible"] = revision_export(revision, "ansible")
    except NotExportable as exc:
        context["ansible_error"] = str(exc)
    wanted = request.GET.get("download")
    if wanted is not None:
        return _download(context, wanted)
    return render(request, "deployments/revision_exports.html", context)


def _download(context: dict[str, Any], key: str) -> HttpResponse:
    """`?download=<key>`: one export of the page as a file with its own name (the page's Download
    buttons); an export that is not made (or no such key) is a 404."""
    revision = context["revision"]
    files = {
        item["key"]: (item["filename"], item["content"])
        for item in [*context["clients"], *context["launches"]]
        if not item["error"] and item["filename"]
    }
    if context["ansible"] is not None:
        files["group_vars"] = (f"{revision.host.name}-r{revision.number}-all.yml", context["ansible"].content)
    if key not in files:
        raise Http404("No such export of this revision.")
    filename, content = files[key]
    response = HttpResponse(content, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{_safe_filename(filename)}"'
    return response


def _safe_filename(name: str) -> str:
    """The file's own name, without folders or anything a header or a file system would trip on."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", base)[:120]
    return cleaned if cleaned.strip(".") else "export.txt"


def _import_page(request: HttpRequest, host: Host, form: AnsibleImportForm) -> HttpResponse:
    return render(request, "deployments/ansible_import.html", {"host": host, "form": form})


@require_GET
@role_required(VIEWER)
def ansible_import_page(request: HttpRequest, host: str) -> HttpResponse:
    return _import_page(request, get_object_or_404(Host, name=host), AnsibleImportForm())


@require_POST
@role_required(OPERATOR)
def ansible_import_submit(request: HttpRequest, host: str) -> HttpResponse:
    host_obj = get_object_or_404(Host, name=host)
    form = AnsibleImportForm(request.POST, request.FILES)
    result = form_save(
        form,
        lambda data: revision_import_ansible(
            host=host_obj,
            text=data["text"],
            message=data["message"],
            tag=data["tag"],
            engine_version=data["engine_version"] or None,
            record_model_dirs=data["record_model_dirs"],
            actor=request.user,
        ),
        fallback="text",
    )
    if result is None:
        return _import_page(request, host_obj, form)
    revision = result.revision
    messages.success(request, f"Imported r{revision.number} from the group_vars.")
    if result.unknown:
        messages.warning(
            request, "Not understood, kept in the revision and written back on export: " + ", ".join(result.unknown)
        )
    for note in result.notes:
        messages.info(request, note)
    return redirect("deployments:revision_detail", host=host_obj.name, number=revision.number)


ansible_import = by_method(get=ansible_import_page, post=ansible_import_submit)

urlpatterns = [
    path("hosts/<slug:host>/revisions/<int:number>/exports/", revision_exports, name="revision_exports"),
    path("hosts/<slug:host>/import/ansible/", ansible_import, name="ansible_import"),
]

"""Diff any two revisions of a host side by side, and a picker."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path
from django.views.decorators.http import require_GET

from controlpanel.roles import VIEWER, role_required
from deployments.forms import DiffPickForm
from deployments.models import active_revision_of
from deployments.selectors.revision_views import changes_between
from hardware.models import Host


def _default_pair(host: Host) -> dict[str, int]:
    """What the picker offers first: the active revision (else the newest) against its parent
    (else the one before it, else the newest other one), older on the left; never a revision
    against itself unless it is the only one."""
    revision = active_revision_of(host) or host.revisions.order_by("-number").first()
    if revision is None:
        return {}
    parent = revision.parent if revision.parent_id and revision.parent.host_id == host.pk else None
    if parent is None:
        parent = host.revisions.filter(number__lt=revision.number).order_by("-number").first()
    if parent is None:
        parent = host.revisions.exclude(pk=revision.pk).order_by("-number").first()
    numbers = sorted({(parent or revision).number, revision.number})
    return {"a": numbers[0], "b": numbers[-1]}


@require_GET
@role_required(VIEWER)
def revision_diff_pick(request: HttpRequest, host: str) -> HttpResponse:
    host_obj = get_object_or_404(Host, name=host)
    numbers = list(host_obj.revisions.order_by("-number").values_list("number", "tag"))
    form = DiffPickForm(request.GET or None, initial=_default_pair(host_obj))
    if form.is_valid():
        a, b = form.cleaned_data["a"], form.cleaned_data["b"]
        known = {n for n, _ in numbers}
        for field, number in (("a", a), ("b", b)):
            if number not in known:
                form.add_error(field, f"{host_obj.name} has no revision r{number}.")
        if form.is_valid():
            return redirect("deployments:revision_diff", host=host_obj.name, a=a, b=b)
    return render(request, "deployments/revision_diff_pick.html", {"host": host_obj, "form": form, "numbers": numbers})


@require_GET
@role_required(VIEWER)
def revision_diff(request: HttpRequest, host: str, a: int, b: int) -> HttpResponse:
    host_obj = get_object_or_404(Host, name=host)
    qs = host_obj.revisions.select_related("host", "model_variant", "author")
    old = get_object_or_404(qs, number=a)
    new = get_object_or_404(qs, number=b)
    diff = changes_between(old, new)
    numbers = list(host_obj.revisions.order_by("-number").values_list("number", "tag"))
    return render(
        request,
        "deployments/revision_diff.html",
        {
            "host": host_obj,
            "old": old,
            "new": new,
            "diff": diff,
            "form": DiffPickForm(initial={"a": a, "b": b}),
            "numbers": numbers,
        },
    )


urlpatterns = [
    path("hosts/<slug:host>/diff/", revision_diff_pick, name="revision_diff_pick"),
    path("hosts/<slug:host>/diff/<int:a>/<int:b>/", revision_diff, name="revision_diff"),
]

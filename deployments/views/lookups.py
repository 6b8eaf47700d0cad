"""What a page's URL names, read for the page, or a 404."""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import get_object_or_404

from deployments import selectors
from deployments.models import DeploymentRevision
from hardware.models import Host


def revision_or_404(host: str, number: int) -> DeploymentRevision:
    """Revision `number` of the host named `host` (selectors.revision_get), or Http404."""
    try:
        return selectors.revision_get(host_name=host, number=number)
    except DeploymentRevision.DoesNotExist as exc:
        raise Http404("No such revision.") from exc


def host_or_404(name: str, *, with_model: bool = False) -> Host:
    """The host named `name` with its deployment's active revision (one query for a host's page),
    and that revision's model too when `with_model` (a page that names what serves), or Http404."""
    active = "deployment__active_revision__model_variant" if with_model else "deployment__active_revision"
    return get_object_or_404(Host.objects.select_related(active), name=name)

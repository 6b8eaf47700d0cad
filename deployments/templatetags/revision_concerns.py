"""What a revision reaches beyond serving (files it opens, code it runs, admin-only variables),
for the revision, diff and switch pages: `{% revision_concerns rev as concerns %}`, then
`concerns|needs_admin`. A tag rather than a model property, so the models never import the
presenters (which read the models)."""

from __future__ import annotations

from django import template

from deployments.models import DeploymentRevision
from deployments.presenters import ConcernRow, concerns_for_revision

register = template.Library()


@register.simple_tag
def revision_concerns(revision: DeploymentRevision) -> list[ConcernRow]:
    return concerns_for_revision(revision)


@register.filter
def needs_admin(concerns: list[ConcernRow]) -> bool:
    return any(c.admin for c in concerns)

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from deployments.exports import NotExportable
from deployments.management.cli import BadInput, PanelCommand, get_host
from deployments.models import DeploymentRevision, active_revision_of
from deployments.services.exports import revision_export


class Command(PanelCommand):
    help = (
        "Print a revision as an Ansible group_vars YAML (default: the host's active, else latest, revision); "
        "the same as `export --to ansible`."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", required=True)
        parser.add_argument("--revision", type=int, default=None, help="revision number")

    def handle(self, *args: Any, **options: Any) -> None:
        host = get_host(options["host"])
        qs = DeploymentRevision.objects.select_related("host", "model_variant").filter(host=host)
        if options["revision"] is not None:
            revision = qs.filter(number=options["revision"]).first()
        else:
            revision = active_revision_of(host) or qs.order_by("-number").first()
        if revision is None:
            raise BadInput(f"{host.name} has no revision {options['revision'] or ''}".rstrip() + ".")
        try:
            exported = revision_export(revision, "ansible")
        except NotExportable as exc:
            raise BadInput(str(exc)) from exc
        for note in exported.notes:
            self.stderr.write(note)
        self.stdout.write(exported.content, ending="")

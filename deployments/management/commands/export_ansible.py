from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandParser

from deployments.management.cli import BadInput, PanelCommand, get_host
from deployments.models import DeploymentRevision
from deployments.services.imports import revision_export_ansible


class Command(PanelCommand):
    help = "Print a revision as an Ansible group_vars YAML (default: the host's active, else latest, revision)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", required=True)
        parser.add_argument("--revision", type=int, default=None, help="revision number")

    def handle(self, *args: Any, **options: Any) -> None:
        host = get_host(options["host"])
        qs = DeploymentRevision.objects.select_related("host", "model_variant").filter(host=host)
        if options["revision"] is not None:
            revision = qs.filter(number=options["revision"]).first()
        else:
            revision = host.active_revision or qs.order_by("-number").first()
        if revision is None:
            raise BadInput(f"{host.name} has no revision {options['revision'] or ''}".rstrip() + ".")
        try:
            exported = revision_export_ansible(revision)
        except ValidationError as exc:
            raise BadInput("; ".join(exc.messages)) from exc
        for name, why in exported.not_exported.items():
            self.stderr.write(f"not exported: {name} ({why})")
        for name in exported.inert:
            self.stderr.write(f"written !unsafe (Ansible will not evaluate its Jinja): {name}")
        self.stdout.write(exported.text, ending="")

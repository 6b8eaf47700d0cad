from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from deployments.management.cli import BadInput, PanelCommand, get_host
from deployments.models import DeploymentRevision, active_revision_of
from deployments.services.exports import TARGETS, VIA, revision_export
from serving.exports import NotExportable


class Command(PanelCommand):
    help = (
        "Print one export of a revision to standard output, exactly as its target runs it: a client config "
        "(opencode, hermes, aider-settings, aider-metadata, claude-code, codex; --via router or door), the host's "
        "launch (start-script, systemd) or the seed role's group_vars (ansible). What the file cannot say goes to "
        "standard error. Exit status 2, with one line saying why, when the revision cannot be exported to that "
        "target."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", required=True)
        parser.add_argument("--revision", type=int, default=None, help="revision number (default: active, else latest)")
        parser.add_argument("--to", required=True, choices=TARGETS, dest="target", help="the export's target")
        parser.add_argument(
            "--via", choices=VIA, default=None,
            help="a client config through the lab router or the host's own front door (default: the router "
            "when clients can reach it)",
        )  # fmt: skip

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
            exported = revision_export(revision, options["target"], options["via"])
        except NotExportable as exc:
            raise BadInput(
                f"r{revision.number} of {host.name} cannot be exported to {options['target']}: {exc}"
            ) from exc
        for note in exported.notes:
            self.stderr.write(note)
        self.stdout.write(exported.content, ending="")

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from controlpanel.context import change_context
from controlpanel.params import MAX_INT
from deployments.choices import OperationState
from deployments.management.cli import (
    BadInput,
    PanelCommand,
    add_operation_options,
    bounded_int,
    get_actor,
    get_host,
    get_revision,
)
from deployments.services.switch import PlanRefused, switch_request


class Command(PanelCommand):
    help = (
        "Switch a host to a revision. With --wait: exit 0 when it is active and healthy, 3 when it failed "
        "and was rolled back, 4 when it failed and could not roll back, 5 when the host refused it before "
        "stopping anything (the previous engine still serves), 1 when the planner refused it, 2 for bad input."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", required=True)
        parser.add_argument("--revision", type=bounded_int(1, MAX_INT), required=True)
        parser.add_argument("--override-reason", default="", help="admin: switch despite planner errors")
        add_operation_options(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        host = get_host(options["host"])
        revision = get_revision(host, options["revision"])
        with change_context("cli"):
            try:
                op = switch_request(
                    revision=revision, override_reason=options["override_reason"], actor=get_actor(options["user"])
                )
            except PlanRefused as exc:
                for f in exc.report.findings:
                    self.stderr.write(f"{f.severity.upper():8} {f.code}: {f.message} Fix: {f.fix}")
                raise CommandError(
                    "The planner refused this switch (an admin may --override-reason).", returncode=1
                ) from exc
            except ValidationError as exc:
                raise BadInput("; ".join(exc.messages)) from exc
        what = f"Switch of {host.name} to r{revision.number}"
        op = self.queued(op, what, wait=options["wait"], timeout=options["timeout"])
        if op is None:
            return
        if op.state == OperationState.SUCCEEDED:
            self.stdout.write(self.style.SUCCESS(f"{host.name} serves r{revision.number}."))
            return
        if op.result.get("rolled_back"):
            raise CommandError(op.error, returncode=3)
        if op.result.get("refused"):  # the host refused before stopping anything: the old engine serves on
            raise CommandError(op.error, returncode=5)
        raise CommandError(op.error or f"Switch {op.state}.", returncode=4)

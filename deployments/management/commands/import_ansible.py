from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandParser

from core.context import change_context
from deployments.management.cli import BadInput, PanelCommand, get_actor, get_host
from deployments.services.imports import revision_import_ansible


class Command(PanelCommand):
    help = "Import an Ansible group_vars file as a new revision of a host; prints the revision's number."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the group_vars file (- for stdin)")
        parser.add_argument("--host", required=True)
        parser.add_argument("--message", required=True)
        parser.add_argument("--tag", default="")
        parser.add_argument("--engine-version", default=None, help="the engine version it runs (default: the file's)")
        parser.add_argument("--user", default=None, help="record this user as the author")
        parser.add_argument(
            "--record-model-dirs",
            action="store_true",
            help="admin: add the role's HF_HOME to the host's model folders when it lies outside them",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        host = get_host(options["host"])
        actor = get_actor(options["user"])
        if options["file"] == "-":
            import sys

            text = sys.stdin.read()
        else:
            path = Path(options["file"])
            if not path.is_file():
                raise BadInput(f"No file {path}.")
            text = path.read_text(encoding="utf-8")
        with change_context("cli"):
            try:
                result = revision_import_ansible(
                    host=host,
                    text=text,
                    message=options["message"],
                    tag=options["tag"],
                    engine_version=options["engine_version"],
                    record_model_dirs=options["record_model_dirs"],
                    actor=actor,
                )
            except ValidationError as exc:
                messages = (
                    [f"{k}: {m}" for k, ms in exc.message_dict.items() for m in ms]
                    if hasattr(exc, "error_dict")
                    else exc.messages
                )
                raise BadInput("; ".join(messages)) from exc
        for name in result.unknown:
            self.stderr.write(f"not understood (kept in the revision): {name}")
        for note in result.notes:
            self.stderr.write(f"note: {note}")
        self.stdout.write(str(result.revision.number))

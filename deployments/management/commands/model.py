from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from controlpanel.context import change_context
from deployments.management.cli import PanelCommand, get_actor, get_host


class Command(PanelCommand):
    help = (
        "Catalog models from Hugging Face: `model import REPO_ID [--revision R] [--file NAME.gguf] "
        "[--token-secret HOST/NAME]` reads the repository's config.json, safetensors index and generation "
        "config, or a GGUF file's header by HTTP ranges (no weights are downloaded). HF_ENDPOINT is honoured."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        imp = sub.add_parser("import", help="add a model to the catalog from its Hugging Face repository")
        imp.add_argument("repo_id")
        imp.add_argument("--revision", default="", help="branch, tag or commit (default: main)")
        imp.add_argument("--file", default="", help="the GGUF file to import, for a repository of GGUF quants")
        imp.add_argument("--name", default="", help="the catalog name (default: from the repository)")
        imp.add_argument(
            "--token-secret", default="", help="HOST/NAME: the host secret holding a token, for gated repositories"
        )
        imp.add_argument("--user", default=None)

    def handle(self, *args: Any, **o: Any) -> None:
        from deployments.management.cli import BadInput
        from deployments.services.hub_imports import model_variant_import_hub

        host, secret = None, ""
        if o["token_secret"]:
            host_name, sep, secret = o["token_secret"].partition("/")
            if not sep or not secret:
                raise BadInput("--token-secret takes HOST/NAME, e.g. --token-secret gpu1/hf-token.")
            host = get_host(host_name)
        with change_context("cli"):
            variant = model_variant_import_hub(
                repo_id=o["repo_id"],
                revision=o["revision"],
                gguf_file=o["file"],
                name=o["name"],
                token_host=host,
                token_secret=secret,
                actor=get_actor(o["user"]),
            )
        size = f"{variant.weights_bytes / 2**30:.2f} GiB of weights" if variant.weights_bytes else "weights unknown"
        what = variant.gguf_file or "config.json"
        self.stdout.write(
            f"Imported {variant.name} from {variant.repo_id}@{variant.revision[:12]} ({what}; {size}; "
            f"{len(variant.hub_files)} file(s) to download)."
        )

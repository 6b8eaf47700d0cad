from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from deployments.choices import OperationState
from deployments.management.cli import (
    ActionCommand,
    Actions,
    BadInput,
    add_operation_options,
    get_actor,
    get_host,
    host_action,
)
from deployments.models import HostModel, ModelVariant, Operation
from deployments.services.host_models import download_request, host_model_delete_request, host_model_list
from deployments.services.hub_imports import model_variant_import_hub


class Command(ActionCommand):
    help = (
        "Catalog models from Hugging Face: `model import REPO_ID [--revision R] [--file NAME.gguf] "
        "[--token-secret HOST/NAME]` reads the repository's config.json, safetensors index and generation "
        "config, or a GGUF file's header by HTTP ranges (no weights are downloaded). HF_ENDPOINT is honoured. "
        "`model download --host H NAME [--token-secret S] [--wait]`: the files to the host's disk, as an "
        "operation on its queue (exit 1 when it failed or was cancelled). `model list --host H`: what is on its "
        "disk. `model delete --host H NAME [--wait]`: refused while a revision in use needs it."
    )

    def add_actions(self, actions: Actions[Any]) -> None:
        imp = actions.add_parser("import", help="add a model to the catalog from its Hugging Face repository")
        imp.add_argument("repo_id")
        imp.add_argument("--revision", default="", help="branch, tag or commit (default: main)")
        imp.add_argument("--file", default="", help="the GGUF file to import, for a repository of GGUF quants")
        imp.add_argument("--name", default="", help="the catalog name (default: from the repository)")
        imp.add_argument(
            "--token-secret", default="", help="HOST/NAME: the host secret holding a token, for gated repositories"
        )
        imp.add_argument("--user", default=None)
        down = host_action(actions, "download", "download a catalog model's files to a host")
        down.add_argument("model", help="the catalog name")
        down.add_argument("--token-secret", default="", help="the host's secret holding a token (gated repositories)")
        remove = host_action(actions, "delete", "delete a downloaded model from a host's disk")
        remove.add_argument("model", help="the catalog name")
        for cmd in (down, remove):
            add_operation_options(cmd)
        host_action(actions, "list", "models on a host's disk")

    def do_list(self, o: dict[str, Any]) -> None:
        host = get_host(o["host"])
        for row in host_model_list(host=host):
            revisions = ", ".join(f"r{r.number}" for r in row.revisions) or "no revision"
            kept = f"; kept: {row.delete_refusal}" if row.delete_refusal else ""
            self.stdout.write(
                f"{row.copy.model_variant.name}\t{row.copy.size_bytes:,} bytes\t{row.copy.path}\t{revisions}{kept}"
            )

    def do_download(self, o: dict[str, Any]) -> None:
        host, variant = get_host(o["host"]), self._variant(o)
        op = download_request(host=host, variant=variant, token_secret=o["token_secret"], actor=get_actor(o["user"]))
        self._follow(op, variant, o)

    def do_delete(self, o: dict[str, Any]) -> None:
        host, variant = get_host(o["host"]), self._variant(o)
        copy = HostModel.objects.filter(host=host, model_variant=variant).first()
        if copy is None:
            raise BadInput(f"{variant.name} is not on {host.name}'s disk (as far as the panel knows).")
        self._follow(host_model_delete_request(copy=copy, actor=get_actor(o["user"])), variant, o)

    def _variant(self, o: dict[str, Any]) -> ModelVariant:
        variant = ModelVariant.objects.filter(name=o["model"]).first()
        if variant is None:
            raise BadInput(f"No catalog model named {o['model']!r}.")
        return variant

    def _follow(self, op: Operation, variant: ModelVariant, o: dict[str, Any]) -> None:
        finished = self.queued(
            op, f"{op.get_kind_display()} of {variant.name} on {op.host.name}", wait=o["wait"], timeout=o["timeout"]
        )
        if finished is None:
            return
        if finished.state != OperationState.SUCCEEDED:
            raise CommandError(finished.error or f"{finished.get_kind_display()} {finished.state}.", returncode=1)
        where = finished.result.get("path") or finished.result.get("deleted") or ""
        self.stdout.write(self.style.SUCCESS(f"{finished.get_kind_display()} of {variant.name} done: {where}"))

    def do_import(self, o: dict[str, Any]) -> None:
        variant = model_variant_import_hub(
            repo_id=o["repo_id"],
            revision=o["revision"],
            gguf_file=o["file"],
            name=o["name"],
            token=o["token_secret"],
            actor=get_actor(o["user"]),
        )
        size = f"{variant.weights_bytes / 2**30:.2f} GiB of weights" if variant.weights_bytes else "weights unknown"
        what = variant.gguf_file or "config.json"
        self.stdout.write(
            f"Imported {variant.name} from {variant.repo_id}@{variant.revision[:12]} ({what}; {size}; "
            f"{len(variant.hub_files)} file(s) to download), for {variant.get_purpose_display().lower()}."
        )

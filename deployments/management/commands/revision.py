from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from controlpanel.params import MAX_INT
from deployments.choices import ServeMode
from deployments.management.cli import (
    ActionCommand,
    Actions,
    BadInput,
    bounded_int,
    describe,
    get_actor,
    get_host,
    parse_pairs,
)
from deployments.models import DeploymentRevision, ModelVariant, active_revision_id_of
from deployments.presenters import launch_for_revision
from deployments.selectors import revision_numbered
from deployments.selectors.revision_views import changes_between
from deployments.services.revisions import revision_derive
from deployments.services.serving_set import serving_mode_set
from hardware.models import Host
from serving.diffing import render_text

NUMBER = bounded_int(1, MAX_INT)  # a revision number


class Command(ActionCommand):
    help = "Revisions: create, list, show, diff."

    def add_actions(self, actions: Actions[Any]) -> None:
        create = actions.add_parser("create", help="record a new revision; prints its number")
        create.add_argument("--host", required=True)
        create.add_argument("--engine")
        create.add_argument("--engine-version", default=None)
        create.add_argument("--model", help="catalog model name")
        create.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE")
        create.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
        create.add_argument("--served-name", default=None)
        create.add_argument("--port", type=bounded_int(1, 65535), default=None)
        create.add_argument("--tag", default="")
        create.add_argument("--message", required=True)
        create.add_argument(
            "--from",
            dest="from_number",
            type=NUMBER,
            default=None,
            help="start from revision N's settings (it becomes the parent)",
        )
        create.add_argument("--user", default=None)
        create.add_argument("--serve", choices=ServeMode.values, help="serve it through the host's front door too")
        lst = actions.add_parser("list")
        lst.add_argument("--host", required=True)
        show = actions.add_parser("show")
        show.add_argument("--host", required=True)
        show.add_argument("number", type=NUMBER)
        diff = actions.add_parser("diff")
        diff.add_argument("--host", required=True)
        diff.add_argument("a", type=NUMBER)
        diff.add_argument("b", type=NUMBER)

    def _revision(self, host: Host, number: int) -> DeploymentRevision:
        try:
            return revision_numbered(host, number)
        except ValidationError as exc:
            raise BadInput(exc.message_dict["revision"][0]) from None

    def do_create(self, o: dict[str, Any]) -> None:
        host = get_host(o["host"])
        base = self._revision(host, o["from_number"]) if o["from_number"] else None
        model = None
        if o["model"]:
            model = ModelVariant.objects.filter(name=o["model"]).first()
            if model is None:
                raise BadInput(f"No model {o['model']!r} in the catalog (see the Models page or `catalog load`).")
        if base is None and (not o["engine"] or model is None):
            raise BadInput("--engine and --model are needed (or --from N to start from a revision).")
        try:
            revision = revision_derive(
                host=host,
                parent=base,
                changes={
                    "engine": o["engine"] or None,
                    "version": o["engine_version"],
                    "model": model,
                    "set": parse_pairs(o["set"], what="--set", typed=True),
                    "set_env": parse_pairs(o["env"], what="--env", typed=False),
                    "served_name": o["served_name"],
                    "port": o["port"],
                },
                tag=o["tag"],
                message=o["message"],
                actor=get_actor(o["user"]),
            )
        except ValidationError as exc:
            raise BadInput(describe(exc)) from exc
        self.stdout.write(str(revision.number))
        if o["serve"]:  # a refusal leaves the revision made (its number printed) and exits 2 with the reason
            serving_mode_set(revision=revision, mode=o["serve"], actor=get_actor(o["user"]))

    def do_list(self, o: dict[str, Any]) -> None:
        host = get_host(o["host"])
        rows = DeploymentRevision.objects.filter(host=host).select_related("model_variant", "author")
        active_id = active_revision_id_of(host)
        for r in rows.order_by("number"):
            active = "*" if active_id == r.pk else " "
            who = r.author.username if r.author else "-"
            first = r.message.splitlines()[0][:60]
            self.stdout.write(
                f"{active} r{r.number:<4} {r.tag[:24]:<24} {r.engine:<9} {r.engine_version or '-':<8} "
                f"{r.model_variant.name[:32]:<32} {who:<10} {r.created_at:%Y-%m-%d} {first}"
            )

    def do_show(self, o: dict[str, Any]) -> None:
        host = get_host(o["host"])
        r = self._revision(host, o["number"])
        self.stdout.write(
            f"r{r.number}"
            + (f" ({r.tag})" if r.tag else "")
            + (" [active]" if active_revision_id_of(host) == r.pk else "")
        )
        self.stdout.write(f"parent:  {'r' + str(r.parent.number) if r.parent else '-'}")
        self.stdout.write(f"author:  {r.author.username if r.author else '-'}   created {r.created_at:%Y-%m-%d %H:%M}")
        self.stdout.write(f"engine:  {r.engine} {r.engine_version or '(latest)'}")
        self.stdout.write(f"model:   {r.model_variant.name}")
        for k, v in sorted(r.knobs.items()):
            self.stdout.write(f"  {k} = {v}")
        for k, v in sorted(r.env.items()):
            self.stdout.write(f"  env {k}={v}")
        launch = launch_for_revision(r)  # the argv the host runs (its bind address), secrets masked
        if launch.error:
            self.stdout.write(f"command: cannot be built: {launch.error}")
        else:
            self.stdout.write("command: " + " ".join(launch.argv))
        self.stdout.write("\n" + r.message)

    def do_diff(self, o: dict[str, Any]) -> None:
        host = get_host(o["host"])
        a, b = self._revision(host, o["a"]), self._revision(host, o["b"])
        self.stdout.write(render_text(changes_between(a, b)))

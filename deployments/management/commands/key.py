from __future__ import annotations

from typing import Any

from deployments.choices import DoorMode
from deployments.management.cli import ActionCommand, Actions, BadInput, add_user_option, get_actor, named_action
from deployments.models import InferenceKey
from deployments.services.inference_keys import door_mode, door_mode_set, key_create, key_revoke


class Command(ActionCommand):
    help = "Inference keys for the hosts' front doors; the panel keeps their digests only."

    def add_actions(self, actions: Actions[Any]) -> None:
        create = actions.add_parser("create", help="make a key and print it, once")
        create.add_argument("--name", required=True)
        create.add_argument("--models", default="", help="names or aliases it may use, comma-separated (default: all)")
        add_user_option(create)
        actions.add_parser("list", help="names, prefixes, models (never a key)")
        named_action(actions, "revoke", "the front doors refuse it from their next poll", host=False)
        mode = actions.add_parser("mode", help="print the door mode (open, keys_required), or set it (admins)")
        mode.add_argument("mode", nargs="?", choices=DoorMode.values, help="the mode to set")
        add_user_option(mode)

    def do_list(self, o: dict[str, Any]) -> None:
        for key in InferenceKey.objects.order_by("name"):
            state = f"revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else "live"
            models = ",".join(key.allowed_models) if key.allowed_models else "all models"
            self.stdout.write(f"{key.name}\t{key.prefix}…\t{models}\t{state}")

    def do_revoke(self, o: dict[str, Any]) -> None:
        key = InferenceKey.objects.filter(name=o["name"]).first()
        if key is None:
            raise BadInput(f"No inference key named {o['name']!r}.")
        key_revoke(key=key, actor=get_actor(o["user"]))
        self.stdout.write(f"Revoked {key.name}.")

    def do_create(self, o: dict[str, Any]) -> None:
        key, secret = key_create(name=o["name"], models=o["models"], actor=get_actor(o["user"]))
        self.stderr.write(
            f"Inference key {key.name} for {', '.join(key.allowed_models or ['every model'])}; shown once:"
        )
        self.stdout.write(secret)

    def do_mode(self, o: dict[str, Any]) -> None:
        if o["mode"]:
            door_mode_set(mode=o["mode"], actor=get_actor(o["user"]))
        self.stdout.write(str(door_mode()))

"""`manage.py token create --user U [--name N]` prints a new API token once;
`token list [--user U]` and `token revoke PREFIX` manage them."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from api.models import ApiToken
from api.tokens import token_create, token_revoke
from deployments.management.cli import ActionCommand, Actions, BadInput, describe


class Command(ActionCommand):
    help = "Personal API tokens: create (printed once), list, revoke."

    def add_actions(self, actions: Actions[Any]) -> None:
        create = actions.add_parser("create", help="Create a token for a user and print it once.")
        create.add_argument("--user", required=True)
        create.add_argument("--name", default="")
        actions.add_parser("list", help="List tokens (never their values).").add_argument("--user")
        actions.add_parser("revoke", help="Revoke a token by its prefix (as `list` shows it).").add_argument("prefix")

    def do_create(self, o: dict[str, Any]) -> None:
        user = get_user_model().objects.filter(username=o["user"]).first()
        if user is None:
            raise BadInput(f"No user {o['user']!r}.")
        try:
            new = token_create(user=user, name=o["name"] or "cli", actor=None)
        except ValidationError as exc:
            raise BadInput(describe(exc)) from exc
        self.stdout.write(new.secret)
        self.stderr.write(f"Token '{new.token.name}' for {user.username}: shown once, store it now.")

    def do_list(self, o: dict[str, Any]) -> None:
        rows = ApiToken.objects.select_related("user").order_by("user__username", "-created_at")
        if o["user"]:
            rows = rows.filter(user__username=o["user"])
        for t in rows:
            state = f"revoked {t.revoked_at:%Y-%m-%d}" if t.revoked_at else "active"
            used = f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never used"
            self.stdout.write(f"{t.prefix}…  {t.user.username:<16} {t.name[:30]:<30} {state:<18} {used}")

    def do_revoke(self, o: dict[str, Any]) -> None:
        prefix = o["prefix"].rstrip("…").rstrip(".")
        matches = list(ApiToken.objects.filter(prefix=prefix, revoked_at__isnull=True)[:2])
        if len(matches) != 1:
            raise BadInput(f"{'No' if not matches else 'More than one'} active token with prefix {prefix!r}.")
        token_revoke(token=matches[0], actor=None)
        self.stdout.write(f"Revoked {prefix}….")

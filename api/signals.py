"""Personal tokens follow their account: a password change, a deactivation or a role change
revokes every active token of the person (api.tokens.tokens_revoke_for_user).

Signals, not calls in each service, because an account changes through several doors: the People
page, the password form, `manage.py changepassword`, Django's admin site."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models.signals import m2m_changed, pre_save

from controlpanel.roles import ROLES

from .tokens import tokens_revoke_for_user

_WATCHED = {"password", "is_active"}


def account_saved(sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any) -> None:
    if instance.pk is None or kwargs.get("raw") or (update_fields is not None and not _WATCHED & set(update_fields)):
        return
    before = sender.objects.filter(pk=instance.pk).values("password", "is_active").first()
    if before is None:
        return
    if before["password"] != instance.password:
        tokens_revoke_for_user(user=instance, reason="the password changed")
    elif before["is_active"] and not instance.is_active:
        tokens_revoke_for_user(user=instance, reason="the account was deactivated")


def groups_changed(sender: Any, instance: Any, action: str, pk_set: Any = None, **kwargs: Any) -> None:
    """A role group given or taken, from either side (user.groups or group.user_set)."""
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    if isinstance(instance, Group):
        users = get_user_model().objects.filter(pk__in=pk_set or ()) if instance.name in ROLES else []
    elif action == "post_clear" or Group.objects.filter(pk__in=pk_set or (), name__in=ROLES).exists():
        users = [instance]
    else:
        users = []
    for user in users:
        tokens_revoke_for_user(user=user, reason="the role changed")


def connect() -> None:
    user_model = get_user_model()
    pre_save.connect(account_saved, sender=user_model, dispatch_uid="api.tokens.account_saved")
    m2m_changed.connect(groups_changed, sender=user_model.groups.through, dispatch_uid="api.tokens.groups_changed")

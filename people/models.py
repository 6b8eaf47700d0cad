"""A person's link to the lab's identity provider (single sign-on, docs/sso.md)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class SsoAccount(models.Model):
    """Who a person is at the identity provider, what groups it last said they are in, and
    whether an admin set their role by hand (the group mapping then leaves it alone).

    A person without one signs in with a password only."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_account")
    # Who the person is: the provider's `iss` and `sub` claims together. A `sub` is unique only
    # at its issuer (another provider, or another tenant of the same one, may hand out the same).
    issuer = models.CharField(
        max_length=500,
        blank=True,
        help_text="The issuer (`iss`) of the ID tokens that sign them in; empty: linked before issuers were kept.",
    )
    # The provider's `sub` claim: stable for the person, unlike a user name or an e-mail address.
    subject = models.CharField(max_length=255)
    provider = models.CharField(max_length=100, help_text="The provider's name when they last signed in.")
    groups = models.JSONField(default=list, blank=True, help_text="Groups the provider sent at the last sign-in.")
    role_by_hand = models.BooleanField(
        default=False, help_text="An admin set the role on the People page; sign-ins keep it."
    )
    first_sign_in = models.DateTimeField()
    last_sign_in = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="sso_account_issuer_subject")]

    def __str__(self) -> str:
        return f"{self.user} at {self.provider}"

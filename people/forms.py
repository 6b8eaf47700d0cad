"""Forms of the People pages: they shape input; the services validate and decide."""

from __future__ import annotations

from django import forms

from controlpanel.roles import ROLES, VIEWER

ROLE_CHOICES = [(r, r) for r in ROLES]
ROLE_HELP = "viewer reads and comments; operator also switches, benchmarks, installs; admin also manages people."


class PersonCreateForm(forms.Form):
    username = forms.CharField(max_length=150, label="User name", help_text="Letters, digits and @ . + - _ only.")
    email = forms.EmailField(max_length=254, required=False, label="E-mail (optional)")
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial=VIEWER, help_text=ROLE_HELP)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES, help_text=ROLE_HELP)

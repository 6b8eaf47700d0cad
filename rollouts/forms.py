"""The rollout form and the host tags form: parse what people type; the services decide."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from controlpanel.params import StrictIntegerField
from deployments.forms import GateFields, parse_lines
from serving.rollouts import MAX_BATCH

from .models import Rollout
from .services import change_from_input

KNOBS_HELP = "One NAME=VALUE per line, set on each host's current revision (e.g. threads=8)."


class RolloutForm(GateFields):
    group = forms.SlugField(max_length=40, help_text="The host tag: every host carrying it takes part.")
    kind = forms.ChoiceField(choices=Rollout.Kind.choices, initial=Rollout.Kind.REVISION)
    knobs = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}), help_text=KNOBS_HELP)
    env = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text="Variables, one NAME=VALUE per line."
    )
    model = forms.CharField(required=False, max_length=200, help_text="A model's name, to move every host to it.")
    message = forms.CharField(
        required=False, max_length=2000, help_text="Why: each new revision's message (revision changes)."
    )
    alias = forms.CharField(required=False, max_length=63, help_text="Alias changes: the alias to move…")
    tag = forms.CharField(required=False, max_length=64, help_text="…to the revision with this tag on each host.")
    batch_size = StrictIntegerField(
        min_value=1, max_value=MAX_BATCH, initial=1, help_text="Hosts per wave after the canary."
    )
    canary = forms.CharField(
        required=False, max_length=63, help_text="The host that goes first (default: first by name)."
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}  # the gate (GateFields): the canary's switch carries it
        for name, what in (("knobs", "knobs"), ("env", "variables")):
            try:
                data[name] = parse_lines(data.get(name) or "", what=what)
            except ValidationError as exc:
                self.add_error(name, exc)
        return data

    def change(self) -> dict[str, Any]:
        """The change as rollout_start takes it."""
        d = self.cleaned_data
        return change_from_input(
            d["kind"],
            knobs=d["knobs"],
            env=d["env"],
            model=d["model"],
            message=d["message"],
            alias=d["alias"],
            tag=d["tag"],
        )


class HostTagsForm(forms.Form):
    tags = forms.CharField(
        required=False, max_length=1000, help_text="The host's groups, separated by commas or spaces."
    )

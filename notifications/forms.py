"""Forms of the notifications page: they shape input; the services validate and decide."""

from __future__ import annotations

from typing import Any

from django import forms

from controlpanel.params import FiniteFloatField
from hardware.models import Host

from .choices import RULE_EVENTS
from .models import Channel
from .regression import DEFAULT_THRESHOLDS, METRICS

URL_HELP = (
    "An Apprise URL, e.g. slack://TokenA/TokenB/TokenC/#ops, discord://id/token, ntfys://ntfy.sh/topic, "
    "matrixs://user:pass@matrix.example/#room, mailtos://user:pass@smtp.example?to=ops@example.com, "
    "jsons://hooks.example/path. It holds the channel's credentials: it is stored encrypted and never shown again."
)


class ChannelForm(forms.Form):
    name = forms.CharField(max_length=80, help_text="What the pages call this channel, e.g. ops-slack.")
    url = forms.CharField(
        max_length=2000,
        label="Apprise URL",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text=URL_HELP,
    )
    enabled = forms.BooleanField(required=False, initial=True, help_text="Disabled channels receive nothing.")

    def __init__(self, *args: Any, editing: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if editing:
            self.fields["url"].required = False
            self.fields["url"].help_text = "Blank keeps the stored URL; a new one replaces it. " + URL_HELP


def threshold_field(key: str) -> str:
    return f"threshold_{key}"


class RuleForm(forms.Form):
    channel = forms.ModelChoiceField(queryset=Channel.objects.order_by("name"), empty_label=None)
    host = forms.ModelChoiceField(
        queryset=Host.objects.filter(is_demo=False).order_by("name"),
        to_field_name="name",
        required=False,
        empty_label="every host",
        help_text="One host, or every host.",
    )
    events = forms.MultipleChoiceField(choices=RULE_EVENTS, widget=forms.CheckboxSelectMultiple)
    enabled = forms.BooleanField(required=False, initial=True)

    def thresholds(self) -> dict[str, float | None]:
        return {m.key: self.cleaned_data.get(threshold_field(m.key)) for m in METRICS}

    def threshold_fields(self) -> list[Any]:
        return [self[threshold_field(m.key)] for m in METRICS]


# One optional limit per benchmark metric, in percent worse than the previous revision's run.
for _metric in METRICS:
    RuleForm.base_fields[threshold_field(_metric.key)] = FiniteFloatField(
        required=False,
        min_value=0.1,
        max_value=1000,
        label=f"{_metric.label}: % {'lower' if _metric.higher_is_better else 'higher'}",
        initial=DEFAULT_THRESHOLDS.get(_metric.key),
    )

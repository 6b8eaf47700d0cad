from __future__ import annotations

from django import forms

from .choices import Verdict
from .services import COMMENT_LIMIT


class DecisionForm(forms.Form):
    verdict = forms.ChoiceField(choices=Verdict.choices)
    comment = forms.CharField(required=False, max_length=COMMENT_LIMIT, widget=forms.Textarea(attrs={"rows": 3}))


class HostReviewForm(forms.Form):
    required = forms.BooleanField(required=False)

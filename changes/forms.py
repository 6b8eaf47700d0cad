from __future__ import annotations

from django import forms

from .choices import Verdict
from .services import COMMENT_LIMIT


class DecisionForm(forms.Form):
    verdict = forms.ChoiceField(choices=Verdict.choices)
    comment = forms.CharField(required=False, max_length=COMMENT_LIMIT, widget=forms.Textarea(attrs={"rows": 3}))
    # The request as the page showed it (changes.binding.seen_token): an approval binds what was read.
    seen = forms.CharField(required=False, max_length=64, widget=forms.HiddenInput)


class HostReviewForm(forms.Form):
    required = forms.BooleanField(required=False)

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from core.maintenance import WEEKDAYS, WindowError, parse_moment, zone_of

NOW, AT, WINDOW = "now", "at", "window"


class WhenForm(forms.Form):
    """When a change runs: now (a form without `when`), at a time, or in the host's next
    maintenance window. The switch page and the alias form carry it."""

    when = forms.ChoiceField(
        choices=[(NOW, "Now"), (AT, "At a time"), (WINDOW, "In the next maintenance window")],
        required=False,
    )
    at = forms.CharField(required=False, max_length=40, help_text="UTC, or with an offset: 2026-12-05T02:00Z.")

    def clean_at(self) -> datetime | None:
        text = self.cleaned_data.get("at") or ""
        if not text.strip():
            return None
        try:
            return parse_moment(text)
        except ValueError as exc:
            raise ValidationError(str(exc)) from exc

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("when") == AT and data.get("at") is None and "at" not in self.errors:
            self.add_error("at", "Give the date and time to run it at.")
        return data

    def later(self) -> dict[str, Any] | None:
        """change_schedule's `at` or `in_window` (after is_valid), or None to run now."""
        when = self.cleaned_data.get("when") or NOW
        if when == AT:
            return {"at": self.cleaned_data["at"]}
        return {"in_window": True} if when == WINDOW else None


class WindowForm(forms.Form):
    weekdays = forms.TypedMultipleChoiceField(
        choices=list(enumerate(WEEKDAYS)), coerce=int, widget=forms.CheckboxSelectMultiple, required=False
    )
    start = forms.TimeField(help_text="Wall clock in the window's time zone, e.g. 02:00.")
    end = forms.TimeField(help_text="Not after the start: it closes the next day.")
    timezone = forms.CharField(max_length=64, initial="UTC", help_text="e.g. Europe/Berlin, UTC.")

    def clean_timezone(self) -> str:
        name = (self.cleaned_data.get("timezone") or "").strip()
        try:
            zone_of(name)
        except WindowError as exc:
            raise ValidationError(str(exc)) from exc
        return name

    def clean_weekdays(self) -> list[int]:
        days = self.cleaned_data.get("weekdays") or []
        if not days:
            raise ValidationError("Pick at least one weekday.")
        return days

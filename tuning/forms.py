"""The new tuning run form: parse what people type (a base revision, the values to try for each
knob of its engine, other engines' knobs where the base's model allows them, an objective, limits,
a benchmark profile, a budget); tuning.services decides what is allowed (tuning_request), and its
refusals come back beside the field they name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.urls import reverse

from controlpanel.params import StrictIntegerField
from core.http import apply_error
from deployments.forms import BenchmarkForm, type_knobs, value_to_text
from deployments.models import DeploymentRevision, active_revision_of
from hardware.models import Host
from serving.benchmarking.gate import METRICS
from serving.engines.base import EngineConfigError
from serving.engines.knobs import KnobSpec
from serving.engines.registry import engine_label, get_adapter
from serving.tuning.space import tunable  # the space's own rule for a tuning knob
from tuning.services import other_engines

PREFIX = "space__"
ENGINE_PREFIX = "engine__"  # + the engine's name, dots as underscores: its knobs as "knob=v1,v2; knob2=v3"
DEFAULTS = "defaults"  # an engine's field saying: try it at its defaults
# BenchmarkForm's fields a tuning run does not take: the goodput SLOs, the served revision.
NOT_TAKEN = ("ttft_slo_ms", "tpot_slo_ms", "e2e_slo_ms", "revision")


@dataclass(frozen=True)
class KnobInput:
    """One knob of the base's engine as the form offers it: its spec, the base's value."""

    field: forms.BoundField
    spec: KnobSpec
    base_value: str | None

    @property
    def hint(self) -> str:
        s = self.spec
        if s.choices:
            return " | ".join(s.choices)
        if s.kind == "bool":
            return "true, false"
        bounds = [
            f"≥ {s.minimum:g}" if s.minimum is not None else "",
            f"≤ {s.maximum:g}" if s.maximum is not None else "",
        ]
        return " ".join(b for b in (s.kind, *bounds) if b)


def knob_specs(engine: str) -> dict[str, KnobSpec]:
    """The tunable knobs of `engine` by name ({} for an engine the panel does not know)."""
    try:
        specs = get_adapter(engine).knobs
    except EngineConfigError:
        return {}
    return {name: spec for name, spec in sorted(specs.items()) if isinstance(spec, KnobSpec) and tunable(spec)}


class TuningForm(BenchmarkForm):
    """The run's input; cleaned_data holds tuning_start's arguments (host and actor aside) once valid."""

    base = forms.TypedChoiceField(coerce=int, label="Base revision", help_text="Each trial is derived from it.")
    objective = forms.ChoiceField(
        choices=[
            (key, f"{'maximise' if m.higher_is_better else 'minimise'} {m.label} ({m.unit})")
            for key, m in METRICS.items()
        ],
        initial="throughput",
    )
    level = forms.CharField(
        required=False,
        max_length=100,
        label="At load level",
        help_text="The level the objective and the limits are judged at, e.g. 'concurrency 4' "
        "(default: the profile's last).",
    )
    limits = forms.CharField(
        required=False,
        max_length=500,
        label="Hard limits",
        widget=forms.TextInput(attrs={"placeholder": "ttft_p95<=500,j_per_token<=base"}),
        help_text="METRIC<=NUMBER, METRIC>=NUMBER, METRIC<=base or METRIC<=0.5*base, comma-separated; "
        "a trial that breaks one is ruled out.",
    )
    max_trials = StrictIntegerField(initial=8, label="Trials at most", help_text="Candidates measured, the base aside.")
    max_minutes = StrictIntegerField(initial=60, label="Minutes at most", help_text="No candidate starts after this.")
    repeats = StrictIntegerField(initial=3, help_text="Rounds the best few and the base get in all (the noise rule).")
    repeat_best = StrictIntegerField(initial=2, label="Best repeated", help_text="How many of the best are repeated.")

    field_order = ["base", "objective", "level", "limits", "profile"]

    def __init__(self, *args: Any, host: Host, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in NOT_TAKEN:
            del self.fields[name]
        self.host = host
        revisions = list(host.revisions.select_related("model_variant").order_by("-number"))
        active = active_revision_of(host)
        self.fields["base"].choices = [
            (
                r.number,
                f"r{r.number}{' (' + r.tag + ')' if r.tag else ''} · {r.get_engine_display()} · "
                f"{r.model_variant.name}{' · served now' if active and r.pk == active.pk else ''}",
            )
            for r in revisions
        ]
        if active is not None:
            self.fields["base"].initial = active.number
        # Another base may be of another engine: the page swaps in the search space of its knobs.
        self.fields["base"].widget.attrs.update(
            {
                "hx-get": reverse("tuning:new", args=[host.name]),
                "hx-trigger": "change",
                "hx-target": "#tuning-knobs",
                "hx-select": "#tuning-knobs",
                "hx-swap": "outerHTML",
            }
        )
        self.base_revision = self._chosen(revisions, active)
        self.specs = knob_specs(self.base_revision.engine) if self.base_revision else {}
        # Other engines this base's model may run on this host: one field each.
        self.other_engines = other_engines(host=host, base=self.base_revision) if self.base_revision else []
        for engine in self.other_engines:
            self.fields[engine_field(engine)] = forms.CharField(
                required=False,
                max_length=1000,
                label=engine_label(engine),
                help_text=f"Its knobs and the values to try, e.g. {_example(engine)}; '{DEFAULTS}' tries it at "
                "its defaults. It starts from none of the base's knobs, at its newest install.",
                widget=forms.TextInput(attrs={"placeholder": "knob=v1,v2; knob2=v3"}),
            )
        for name, spec in self.specs.items():
            self.fields[PREFIX + name] = forms.CharField(
                required=False,
                max_length=500,
                label=name,
                help_text=spec.help,
                widget=forms.TextInput(attrs={"placeholder": "values, comma-separated"}),
            )

    def _chosen(
        self, revisions: list[DeploymentRevision], active: DeploymentRevision | None
    ) -> DeploymentRevision | None:
        """The base the space's knobs are offered for: the one asked for, else the served one."""
        asked = self.data.get("base") if self.is_bound else self.initial.get("base")
        by_number = {str(r.number): r for r in revisions}
        return by_number.get(str(asked)) or active or (revisions[0] if revisions else None)

    def knob_inputs(self) -> tuple[list[KnobInput], list[KnobInput]]:
        """(the knobs the base sets, the others): the first shown open, the others folded."""
        knobs = self.base_revision.knobs if self.base_revision and isinstance(self.base_revision.knobs, dict) else {}
        set_: list[KnobInput] = []
        other: list[KnobInput] = []
        for name, spec in self.specs.items():
            item = KnobInput(self[PREFIX + name], spec, value_to_text(knobs[name]) if name in knobs else None)
            (set_ if name in knobs or self[PREFIX + name].value() else other).append(item)
        return set_, other

    def engine_inputs(self) -> list[forms.BoundField]:
        """The fields of the other engines, in the order offered."""
        return [self[engine_field(e)] for e in self.other_engines]

    def _engines(self, data: dict[str, Any]) -> dict[str, dict[str, list[Any]]]:
        engines: dict[str, dict[str, list[Any]]] = {}
        for engine in self.other_engines:
            text = (data.get(engine_field(engine)) or "").strip()
            if not text:
                continue
            try:
                engines[engine] = parse_engine_knobs(engine, text)
            except ValidationError as exc:
                self.add_error(engine_field(engine), exc)
        return engines

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        engines = self._engines(data)
        space: dict[str, list[Any]] = {}
        engine = self.base_revision.engine if self.base_revision else ""
        for name in self.specs:
            text = data.get(PREFIX + name) or ""
            values = [v.strip() for v in text.split(",") if v.strip()]
            if not values:
                continue
            try:
                space[name] = [type_knobs(engine, {name: v})[name] for v in values]
            except ValidationError as exc:
                self.add_error(PREFIX + name, exc)
        if not space and not engines and not self.errors:
            self.add_error(None, "Give at least one knob two values or more to try: the search space is empty.")
        data["space"], data["engines"] = space, engines
        return data

    def request(self) -> dict[str, Any]:
        """tuning_start's arguments from the cleaned form."""
        d = self.cleaned_data
        base = self.host.revisions.filter(number=d["base"]).first()
        names = ("objective", "level", "limits", "max_trials", "max_minutes", "repeats", "repeat_best")
        return {
            "base": base,
            "space": d["space"],
            "engines": d["engines"] or None,
            "profile": d["benchmark_profile"],
            **{k: d[k] for k in names},
        }

    def add_refusal(self, exc: ValidationError) -> None:
        """A refusal of tuning_start's beside what it names: a knob's beside that knob when the
        message names one, the rest of the space's above the knobs; an engine's beside its field."""
        if hasattr(exc, "error_dict") and "engines" in exc.message_dict:
            for message in exc.message_dict["engines"]:
                engine = next((e for e in self.other_engines if message.startswith(engine_label(e))), None)
                self.add_error(engine_field(engine) if engine else None, message)
            exc = ValidationError({k: v for k, v in exc.message_dict.items() if k != "engines"})
            if not exc.error_dict:
                return
        if hasattr(exc, "error_dict") and "space" in exc.message_dict:
            for message in exc.message_dict["space"]:
                knob = next((n for n in self.specs if n in re.findall(r"[a-z_0-9]+", message)), None)
                self.add_error(PREFIX + knob if knob and self[PREFIX + knob].value() else None, message)
            exc = ValidationError({k: v for k, v in exc.message_dict.items() if k != "space"})
            if not exc.error_dict:
                return
        apply_error(self, exc)


def engine_field(engine: str) -> str:
    return ENGINE_PREFIX + engine.replace(".", "_")


def _example(engine: str) -> str:
    tunables = list(knob_specs(engine))[:1]
    return f"{tunables[0]}=4,8" if tunables else "knob=v1,v2"


def parse_engine_knobs(engine: str, text: str) -> dict[str, list[Any]]:
    """ "knob=v1,v2; knob2=v3" -> {knob: [v1, v2], knob2: [v3]}, each value typed by `engine`'s
    knob table (type_knobs, as the base's knobs are); "defaults" -> {} (the engine at its
    defaults). ValidationError naming what it cannot read."""
    if text.strip().lower() == DEFAULTS:
        return {}
    knobs: dict[str, list[Any]] = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        name, sep, values = part.partition("=")
        name = name.strip()
        texts = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name or not texts:
            raise ValidationError(f"{part[:60]!r} is not knob=value,value (or '{DEFAULTS}').")
        if name in knobs:
            raise ValidationError(f"{name[:60]} is named twice.")
        knobs[name] = [next(iter(type_knobs(engine, {name: v}).values())) for v in texts]
    return knobs

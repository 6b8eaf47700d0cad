"""Forms: parse and type what people type; services decide what is allowed."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from deployments.choices import Engine
from deployments.engines.base import EngineConfigError
from deployments.engines.knobs import normalise_knob
from deployments.engines.registry import get_adapter
from deployments.models import ModelVariant

# Knobs the panel itself reads (not engine flags): `vision` turns a GGUF's projector off.
PANEL_KNOBS = {"vision": "bool"}
TEXT_LIMIT = 20_000


# --- KNOB=VALUE text <-> typed dicts -------------------------------------------------------------


def value_to_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def dict_to_lines(values: dict[str, Any] | None) -> str:
    return "\n".join(f"{k}={value_to_text(v)}" for k, v in (values or {}).items())


def parse_lines(text: str, *, what: str) -> dict[str, str]:
    """`NAME=VALUE` lines (blank lines and `#` comments skipped) -> {NAME: "VALUE"}."""
    if len(text) > TEXT_LIMIT:
        raise ValidationError(f"Too much text for {what}.")
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValidationError(f"Line {number}: write {what} as NAME=VALUE, not {line[:60]!r}.")
        if name in out:
            raise ValidationError(f"Line {number}: {name} is set twice.")
        out[name] = value.strip()
    return out


def type_knobs(engine: str, raw: dict[str, str]) -> dict[str, Any]:
    """Type each knob by the engine adapter's knob table (ints, floats, bools, JSON objects)."""
    try:
        specs = get_adapter(engine).knobs  # type: ignore[attr-defined]
    except EngineConfigError as exc:
        raise ValidationError(str(exc)) from exc
    typed: dict[str, Any] = {}
    for name, text in raw.items():
        key = name.replace("-", "_").lstrip("_")
        if key in PANEL_KNOBS:
            if text.lower() not in ("true", "false", "yes", "no", "on", "off", "1", "0"):
                raise ValidationError(f"{key} must be true or false, not {text!r}.")
            typed[key] = text.lower() in ("true", "yes", "on", "1")
            continue
        spec = specs.get(key)
        if spec is None:
            close = [k for k in specs if k.replace("_", "") == key.replace("_", "")]
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValidationError(f"{engine} has no knob {name!r}{hint}.")
        try:
            typed[key] = normalise_knob(spec, text)
        except EngineConfigError as exc:
            raise ValidationError(str(exc)) from exc
    return typed


def apply_error(form: forms.Form, exc: ValidationError, *, fallback: str | None = None) -> None:
    """Put a service's ValidationError beside the field it names (knob names -> `knobs`)."""
    if not hasattr(exc, "error_dict"):
        form.add_error(None, exc.messages)
        return
    for key, errors in exc.message_dict.items():
        target = key if key in form.fields else fallback
        messages = errors if target == key else [f"{key}: {m}" for m in errors]
        form.add_error(target, messages)


# --- revisions ----------------------------------------------------------------------------------


class RevisionForm(forms.Form):
    """A new revision: every field a revision stores, knobs and env as NAME=VALUE lines."""

    model_variant = forms.ModelChoiceField(queryset=ModelVariant.objects.none(), label="Model")
    engine = forms.ChoiceField(choices=Engine.choices)
    engine_version = forms.CharField(max_length=40, required=False, help_text="Empty = the latest known.")
    knobs = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false", "class": "mono"}),
        required=False,
        help_text="One KNOB=VALUE per line (engine flag names with underscores, e.g. max_model_len=32768).",
    )
    env = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "mono"}),
        required=False,
        help_text="NAME=VALUE per line. Secrets go in the host's secret store, never here.",
    )
    served_name = forms.CharField(max_length=200, required=False)
    port = forms.IntegerField(min_value=1, max_value=65535, initial=8000)
    api_key_secret = forms.ChoiceField(required=False, label="API key secret")
    hf_token_secret = forms.ChoiceField(required=False, label="HF token secret")
    tag = forms.CharField(max_length=120, required=False)
    message = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), help_text="What changed and why.")
    parent = forms.IntegerField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, host: Any, preview: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.host = host
        self.fields["model_variant"].queryset = ModelVariant.objects.order_by("is_demo", "family", "name")
        names = [("", "(none)")] + [(n, n) for n in host.secrets.order_by("name").values_list("name", flat=True)]
        self.fields["api_key_secret"].choices = names
        self.fields["hf_token_secret"].choices = names
        if preview:  # the live planner reads the settings; a message is not needed yet
            self.fields["message"].required = False
            self.fields["port"].required = False

    @classmethod
    def initial_from(cls, revision: Any) -> dict[str, Any]:
        return {
            "model_variant": revision.model_variant_id,
            "engine": revision.engine,
            "engine_version": revision.engine_version,
            "knobs": dict_to_lines(revision.knobs),
            "env": dict_to_lines(revision.env),
            "served_name": revision.served_name,
            "port": revision.port,
            "api_key_secret": revision.api_key_secret,
            "hf_token_secret": revision.hf_token_secret,
            "parent": revision.number,
        }

    def clean_env(self) -> dict[str, str]:
        return parse_lines(self.cleaned_data.get("env") or "", what="environment variables")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        engine = data.get("engine")
        raw = self.data.get(self.add_prefix("knobs"), "") or ""
        try:
            lines = parse_lines(str(raw), what="knobs")
            data["knobs"] = type_knobs(engine, lines) if engine else {}
        except ValidationError as exc:
            self.add_error("knobs", exc)
        parent_number = data.get("parent")
        data["parent_revision"] = None
        if parent_number:
            data["parent_revision"] = self.host.revisions.filter(number=parent_number).first()
            if data["parent_revision"] is None:
                self.add_error("parent", f"{self.host.name} has no revision r{parent_number}.")
        return data


class CommentForm(forms.Form):
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 3, "placeholder": "Review this revision"}))


class SwitchForm(forms.Form):
    override_reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        max_length=1000,
        help_text="Admins only: why launch despite the planner's errors (recorded).",
    )


class DiffPickForm(forms.Form):
    a = forms.IntegerField(min_value=1, label="From revision")
    b = forms.IntegerField(min_value=1, label="To revision")


# --- imports ------------------------------------------------------------------------------------


class HfConfigImportForm(forms.Form):
    config = forms.FileField(required=False, label="config.json", help_text="Upload it, or paste it below.")
    config_text = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false", "class": "mono"}),
        required=False,
        label="…or paste config.json",
    )
    name = forms.CharField(max_length=200, help_text="Catalog name, e.g. Qwen3.8-27B-W4A16-AWQ.")
    repo_id = forms.CharField(max_length=300, required=False, label="Repository id")
    family = forms.CharField(max_length=100, required=False)
    generation = forms.CharField(max_length=100, required=False)
    quantization = forms.CharField(max_length=60, required=False)
    weights_gib = forms.FloatField(min_value=0, required=False, label="Weights (GiB)")
    tool_call_parser = forms.CharField(max_length=60, required=False)
    reasoning_parser = forms.CharField(max_length=60, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        upload = data.get("config")
        text = data.get("config_text") or ""
        if upload:
            if upload.size > 1_000_000:
                self.add_error("config", "That file is too large for a config.json.")
                return data
            try:
                text = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                self.add_error("config", "config.json must be UTF-8 text.")
                return data
        if not text.strip() and "config" not in self.errors:
            self.add_error("config", "Upload a config.json or paste its text.")
        data["text"] = text
        gib = data.get("weights_gib")
        data["weights_bytes"] = int(gib * 1024**3) if gib else None
        return data


class GgufImportForm(forms.Form):
    path = forms.CharField(max_length=500, label="GGUF file path", help_text="A path the panel can read.")
    name = forms.CharField(max_length=200, required=False, help_text="Empty = the name in the file's header.")
    family = forms.CharField(max_length=100, required=False)
    generation = forms.CharField(max_length=100, required=False)


class AnsibleImportForm(forms.Form):
    file = forms.FileField(required=False, label="group_vars file")
    text = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 12, "spellcheck": "false", "class": "mono"}),
        required=False,
        label="…or paste it",
    )
    engine_version = forms.CharField(
        max_length=40, required=False, help_text="The engine version it runs (group_vars rarely pin one)."
    )
    tag = forms.CharField(max_length=120, required=False)
    message = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        upload = data.get("file")
        text = data.get("text") or ""
        if upload:
            if upload.size > 1_000_000:
                self.add_error("file", "That file is too large for a group_vars file.")
                return data
            try:
                text = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                self.add_error("file", "The file must be UTF-8 text.")
                return data
        if not text.strip() and "file" not in self.errors:
            self.add_error("text", "Upload a group_vars file or paste it.")
        data["text"] = text
        return data

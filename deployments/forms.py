"""Forms: parse and type what people type; services decide what is allowed."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from controlpanel.params import MAX_INT, FiniteFloatField, StrictIntegerField, StrictModelChoiceField, parse_int
from deployments import presenters
from deployments.choices import DoorMode, Engine, ModelPurpose, ServeMode
from deployments.models import DeploymentRevision, ModelVariant, Secret
from deployments.services.benchmarks import profile_from_input
from deployments.services.gates import gate_from_input
from deployments.services.host_models import download_candidates
from deployments.services.secrets import HUB_REFUSAL
from hardware.models import Host
from serving.benchmarking.profiles import PROFILES
from serving.engines.base import EngineConfigError
from serving.engines.registry import get_adapter
from serving.safety import UnsafeValueError, check_json_value, check_text_value

# Knobs the panel itself reads (not engine flags): `vision` turns a GGUF's projector off.
PANEL_KNOBS = {"vision": "bool"}
TEXT_LIMIT = 20_000
MAX_WEIGHTS_GIB = 100 * 1024


# --- KNOB=VALUE text <-> typed dicts -------------------------------------------------------------


def value_to_text(value: object) -> str:
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
        adapter = get_adapter(engine)
    except EngineConfigError as exc:
        raise ValidationError(str(exc)) from exc
    specs = adapter.knobs
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
            typed[key] = adapter.knob_value(key, text)
        except EngineConfigError as exc:
            raise ValidationError(str(exc)) from exc
        except ValueError as exc:  # a number or JSON too odd to read (e.g. 5,000 digits)
            raise ValidationError(f"{key}: {text[:40]!r} is not a value this knob takes.") from exc
    return typed


def check_json_field(form: forms.Form, name: str, value: object) -> Any:
    """`check_json_value` on a parsed JSON-ish field; a form error beside it when unsafe."""
    try:
        return check_json_value(value, field=name)
    except UnsafeValueError as exc:
        form.add_error(name, str(exc))
        return None


def upload_or_pasted(form: forms.Form, data: dict[str, Any], upload: str, pasted: str, *, what: str) -> str | None:
    """The text of the file uploaded in field `upload` (at most 1 MB of UTF-8, no NUL: an upload
    bypasses CharField's checks), else what was pasted in `pasted`; None, with the reason on the
    form, when neither gives a text. `what` names the file in the messages ("a config.json")."""
    file, text = data.get(upload), data.get(pasted) or ""
    if file:
        if file.size > 1_000_000:
            form.add_error(upload, f"That file is too large for {what}.")
            return None
        try:
            text = file.read().decode("utf-8")
            check_text_value(text, field=upload, max_len=1_000_000)
        except UnicodeDecodeError:
            form.add_error(upload, f"The file must be UTF-8 text ({what}).")
            return None
        except UnsafeValueError as exc:
            form.add_error(upload, str(exc))
            return None
    if not text.strip():
        if upload not in form.errors:
            form.add_error(upload, f"Upload {what} or paste its text.")
        return None
    return text


# --- revisions ----------------------------------------------------------------------------------


# What the live planner does not read: left out of the preview's validation, so an empty
# message or a half-typed tag never holds the report back.
PREVIEW_IGNORED = ("message", "tag", "api_key_secret", "hf_token_secret", "parent")


def _variant_label(variant: ModelVariant) -> str:
    """A model as the revision form lists it: a base model served for completions says so (it
    needs no chat template); a chat model whose GGUF has none says that."""
    if variant.purpose == ModelPurpose.COMPLETIONS:
        return f"{variant.name} (completions)"
    return f"{variant.name} (no chat template)" if variant.has_chat_template is False else variant.name


class RevisionForm(forms.Form):
    """A new revision: every field a revision stores, knobs and env as NAME=VALUE lines. Once
    valid, `cleaned_data` holds every field of the revision's spec (views.revisions._derive hands them
    to `revision_derive`) with its tag and message; `parent` is the parent revision."""

    model_variant = StrictModelChoiceField(queryset=ModelVariant.objects.none(), label="Model")
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
    port = StrictIntegerField(
        min_value=1,
        max_value=65535,
        initial=8080,
        help_text="Engine defaults: llama.cpp 8080, vLLM 8001, SGLang 30000, Ollama 11434 (8000 is the panel's own).",
    )
    api_key_secret = forms.ChoiceField(required=False, label="API key secret")
    hf_token_secret = forms.ChoiceField(required=False, label="HF token secret")
    tag = forms.CharField(max_length=120, required=False)
    message = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), max_length=TEXT_LIMIT, help_text="What changed and why."
    )
    parent = StrictIntegerField(widget=forms.HiddenInput, required=False, min_value=1, max_value=MAX_INT)

    def __init__(self, *args: Any, host: Host, preview: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.host = host
        self.fields["model_variant"].queryset = ModelVariant.objects.order_by("is_demo", "family", "name")
        self.fields["model_variant"].label_from_instance = _variant_label
        names = [("", "(none)")] + [(n, n) for n in host.secrets.order_by("name").values_list("name", flat=True)]
        self.fields["api_key_secret"].choices = names
        self.fields["hf_token_secret"].choices = names
        if preview:  # the live planner reads the settings, nothing else: a half-filled form previews
            for name in PREVIEW_IGNORED:
                del self.fields[name]
            self.fields["port"].required = False

    def chat_template_warning(self) -> str:
        """The chosen model's warning when its GGUF has no chat template and the knobs give it none
        (`chat_template` or `chat_template_file`); "" otherwise."""
        try:
            knobs = parse_lines(str(self["knobs"].value() or ""), what="knobs")
        except ValidationError:
            knobs = {}
        if knobs.get("chat_template") or knobs.get("chat_template_file"):
            return ""
        chosen = self["model_variant"].value()
        if isinstance(chosen, ModelVariant):
            return chosen.chat_template_warning
        try:
            pk = int(str(chosen))
        except (TypeError, ValueError):
            return ""
        variant = ModelVariant.objects.filter(pk=pk, has_chat_template=False).first()
        return variant.chat_template_warning if variant is not None else ""

    @classmethod
    def initial_from(cls, revision: DeploymentRevision) -> dict[str, Any]:
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
        env = parse_lines(self.cleaned_data.get("env") or "", what="environment variables")
        try:
            check_json_value(env, field="env")
        except UnsafeValueError as exc:
            raise ValidationError(str(exc)) from exc
        return env

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        engine = data.get("engine")
        if "knobs" not in self.errors:  # the raw text passed CharField's checks (no NUL)
            raw = self.data.get(self.add_prefix("knobs"), "") or ""
            try:
                lines = parse_lines(str(raw), what="knobs")
                knobs = type_knobs(engine, lines) if engine else {}
            except ValidationError as exc:
                self.add_error("knobs", exc)
            else:
                # JSON knobs (speculative_config, hf_overrides, ...) can carry \u0000, NaN, depth.
                data["knobs"] = check_json_field(self, "knobs", knobs)
        parent_number = data.get("parent")
        data["parent"] = self.host.revisions.filter(number=parent_number).first() if parent_number else None
        if parent_number and data["parent"] is None:
            self.add_error("parent", f"{self.host.name} has no revision r{parent_number}.")
        return data


class CommentForm(forms.Form):
    body = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "Review this revision"}), max_length=TEXT_LIMIT
    )


PLAYGROUND_TURNS = 200  # messages of history one chat carries
PLAYGROUND_HISTORY_CHARS = 400_000  # ~100K tokens of history: more than any context here


class PlaygroundForm(forms.Form):
    """One message of the revision page's chat playground, with the page's history of the
    conversation (a JSON list of user and assistant turns) and the sampling the person set."""

    prompt = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "Ask the served model something"}),
        max_length=TEXT_LIMIT,
        label="Message",
    )
    system = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "(none)"}),
        max_length=TEXT_LIMIT,
        required=False,
        label="System prompt",
    )
    temperature = FiniteFloatField(
        min_value=0.0, max_value=2.0, required=False, widget=forms.NumberInput(attrs={"step": "0.05"})
    )
    top_p = FiniteFloatField(
        min_value=0.0, max_value=1.0, required=False, label="top_p", widget=forms.NumberInput(attrs={"step": "0.05"})
    )
    max_tokens = StrictIntegerField(min_value=1, max_value=1_000_000, required=False, label="Max tokens")
    history = forms.CharField(required=False, widget=forms.HiddenInput, max_length=2 * PLAYGROUND_HISTORY_CHARS)

    def clean_history(self) -> list[dict[str, str]]:
        raw = self.cleaned_data.get("history") or "[]"
        try:
            turns = json.loads(raw)
        except ValueError:
            raise ValidationError("The conversation could not be read: reload the page to start again.") from None
        if not isinstance(turns, list) or len(turns) > PLAYGROUND_TURNS:
            raise ValidationError(f"A conversation carries at most {PLAYGROUND_TURNS} messages: start a new one.")
        history, size = [], 0
        for turn in turns:
            ok = isinstance(turn, dict) and turn.get("role") in ("user", "assistant")
            if not ok or not isinstance(turn.get("content"), str):
                raise ValidationError("Each message of the conversation is a user or assistant turn with its text.")
            try:
                content = check_text_value(turn["content"], field="a message", max_len=TEXT_LIMIT * 4)
            except UnsafeValueError as exc:
                raise ValidationError(str(exc)) from None
            size += len(content)
            history.append({"role": turn["role"], "content": content})
        if size > PLAYGROUND_HISTORY_CHARS:
            raise ValidationError("The conversation is too long to send again: start a new one.")
        return history

    def messages(self) -> list[dict[str, str]]:
        """The conversation to send: the history, then this message."""
        return [*self.cleaned_data["history"], {"role": "user", "content": self.cleaned_data["prompt"]}]


class GateFields(forms.Form):
    """A benchmark gate as people type it: on the switch form, and on the rollout form (where the
    canary's switch carries it). cleaned_data["gate"] is a GateRequest, or None for no gate."""

    gate_profile = forms.ChoiceField(
        choices=[("", "No benchmark gate")] + [(name, f"{name}: {p.description}") for name, p in PROFILES.items()],
        required=False,
        label="Benchmark gate",
        help_text="After the health check, run this profile on the new revision and compare it with the previous "
        "revision's run of it (measured first when it has none); beyond a limit, roll back.",
    )
    gate_limits = forms.CharField(
        required=False,
        max_length=200,
        initial="decode=5,ttft_p95=10",
        label="Gate limits (%)",
        help_text="decode, throughput: at most that much below; ttft_p95, j_per_token: at most that much above.",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        data["gate"] = None
        if data.get("gate_profile"):
            try:
                data["gate"] = gate_from_input(profile=data["gate_profile"], limits=data.get("gate_limits") or "")
            except ValidationError as exc:  # its messages name gate_profile or gate_limits
                self.add_error(None, exc)
        return data


class SwitchForm(GateFields):
    field_order = ["override_reason", "gate_profile", "gate_limits"]
    override_reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        required=False,
        max_length=1000,
        help_text="Admins only: why launch despite the planner's errors (recorded).",
    )


class DiffPickForm(forms.Form):
    a = StrictIntegerField(min_value=1, max_value=MAX_INT, label="From revision")
    b = StrictIntegerField(min_value=1, max_value=MAX_INT, label="To revision")


# --- benchmarks --------------------------------------------------------------------------------

CUSTOM = "custom"
MAX_LEVELS = 16
MAX_CONCURRENCY = 1024
MAX_INPUT_TOKENS = 2_000_000
MAX_OUTPUT_TOKENS = 200_000
MAX_REQUESTS = 10_000
MAX_SLO_MS = 3_600_000.0  # an hour: any latency target beyond it measures nothing

# Which form field a profile validation message belongs to.
_FIELD_WORDS = (
    ("concurrency", "concurrency"),
    ("input_tokens", "input_tokens"),
    ("output_tokens", "output_tokens"),
    ("num_requests", "requests"),
    ("served context", "input_tokens"),
)


def parse_levels(text: str) -> list[int] | None:
    """`1,2,4` -> [1, 2, 4] (ASCII digits, 1..MAX_CONCURRENCY, at most MAX_LEVELS, no repeats);
    empty -> None; ValidationError otherwise."""
    text = text.strip()
    if not text:
        return None
    if len(text) > 200:
        raise ValidationError("Too many concurrency levels.")
    levels: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            level = parse_int(part, name="level", minimum=0)
        except ValueError:
            raise ValidationError(f"{part[:20]!r} is not a whole number; write levels like 1,2,4.") from None
        if not 1 <= level <= MAX_CONCURRENCY:
            raise ValidationError(f"Each level must be between 1 and {MAX_CONCURRENCY} streams, got {level}.")
        levels.append(level)
    if not levels:
        raise ValidationError("Give at least one level, e.g. 1,4.")
    if len(levels) > MAX_LEVELS:
        raise ValidationError(f"At most {MAX_LEVELS} levels.")
    if len(set(levels)) != len(levels):
        raise ValidationError("A level appears twice.")
    return levels


class BenchmarkForm(forms.Form):
    """A named profile, or custom numbers (which also override a named profile's). The
    `bench` command validates its arguments through this form too, so the bounds are one."""

    profile = forms.ChoiceField(
        choices=[(name, f"{name}: {p.description}") for name, p in PROFILES.items()]
        + [(CUSTOM, "custom: the numbers below")],
        initial="quick",
    )
    concurrency = forms.CharField(
        required=False,
        max_length=200,
        help_text="Streams per level, comma-separated, e.g. 1,2,4,8.",
        widget=forms.TextInput(attrs={"placeholder": "1,4", "inputmode": "numeric"}),
    )
    input_tokens = StrictIntegerField(required=False, min_value=1, max_value=MAX_INPUT_TOKENS, label="Input tokens")
    output_tokens = StrictIntegerField(required=False, min_value=1, max_value=MAX_OUTPUT_TOKENS, label="Output tokens")
    requests = StrictIntegerField(required=False, min_value=1, max_value=MAX_REQUESTS, label="Requests per level")
    ttft_slo_ms = FiniteFloatField(required=False, min_value=0.001, max_value=MAX_SLO_MS, label="TTFT SLO (ms)")
    tpot_slo_ms = FiniteFloatField(required=False, min_value=0.001, max_value=MAX_SLO_MS, label="TPOT SLO (ms)")
    e2e_slo_ms = FiniteFloatField(required=False, min_value=0.001, max_value=MAX_SLO_MS, label="End-to-end SLO (ms)")
    revision = StrictIntegerField(required=False, min_value=1, max_value=MAX_INT, widget=forms.HiddenInput)

    def clean_concurrency(self) -> list[int] | None:
        return parse_levels(self.cleaned_data.get("concurrency") or "")

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        name = data.get("profile")
        custom = {
            "concurrency": data.get("concurrency"),
            "input_tokens": data.get("input_tokens"),
            "output_tokens": data.get("output_tokens"),
            "requests": data.get("requests"),
        }
        if name == CUSTOM and all(v is None for v in custom.values()):
            self.add_error("concurrency", "A custom profile needs at least one number (levels, tokens or requests).")
            return data
        slos = {
            key: data[f"{key.removesuffix('_ms')}_slo_ms"]
            for key in ("ttft_ms", "tpot_ms", "e2e_ms")
            if data.get(f"{key.removesuffix('_ms')}_slo_ms") is not None
        }
        try:
            profile = profile_from_input(name=None if name == CUSTOM else name, slos=slos or None, **custom)
        except ValidationError as exc:
            for message in presenters.validation_messages(exc):
                text = message.removeprefix("profile: ")
                field = next((f for word, f in _FIELD_WORDS if word in text), "profile")
                self.add_error(field, text)
            return data
        if check_json_field(self, "profile", profile.to_dict()) is not None:
            data["benchmark_profile"] = profile
        return data


# --- imports ------------------------------------------------------------------------------------


class HfConfigImportForm(forms.Form):
    """A catalog entry from a config.json; once valid, `cleaned_data` holds exactly
    `model_variant_import_hf_config`'s arguments (but actor)."""

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
    # 100 TiB: fifty times the largest open checkpoint (about 2 TiB for 1T parameters in BF16).
    weights_gib = FiniteFloatField(min_value=0, max_value=MAX_WEIGHTS_GIB, required=False, label="Weights (GiB)")
    tool_call_parser = forms.CharField(max_length=60, required=False)
    reasoning_parser = forms.CharField(max_length=60, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        data["text"] = upload_or_pasted(self, data, "config", "config_text", what="a config.json") or ""
        gib = data.pop("weights_gib", None)
        data["weights_bytes"] = int(gib * 1024**3) if gib else None
        data.pop("config", None)
        data.pop("config_text", None)
        return data


class GgufImportForm(forms.Form):
    """`cleaned_data` holds exactly `model_variant_import_gguf`'s arguments (but actor)."""

    path = forms.CharField(
        max_length=500,
        label="GGUF file",
        help_text="A file name in the model folders (model.gguf, or sub/model.gguf), or an absolute path the panel "
        "can read.",
        widget=forms.TextInput(attrs={"list": "gguf-files", "autocomplete": "off"}),
    )
    name = forms.CharField(max_length=200, required=False, help_text="Empty = the name in the file's header.")
    family = forms.CharField(max_length=100, required=False)
    generation = forms.CharField(max_length=100, required=False)


class ModelPurposeForm(forms.Form):
    """What a catalog model is for (`model_variant_set_purpose`)."""

    purpose = forms.ChoiceField(choices=ModelPurpose.choices, label="For")


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
    message = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=TEXT_LIMIT)
    record_model_dirs = forms.BooleanField(
        required=False,
        label="Record the role's HF_HOME as a model folder",
        help_text="Admin: when the role's cache folder lies outside the host's model folders, add it to them.",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        data["text"] = upload_or_pasted(self, data, "file", "text", what="a group_vars file") or ""
        return data


# --- models from Hugging Face ------------------------------------------------------------------


def _token_choices() -> list[tuple[str, str]]:
    """Only the secrets an admin marked as hub tokens: no other is ever sent to a hub."""
    secrets = Secret.objects.filter(hub_token=True).select_related("host").order_by("host__name", "name")
    return [("", "(none: a public repository)")] + [
        (f"{s.host.name}/{s.name}", f"{s.host.name} / {s.name}") for s in secrets[:500]
    ]


def _hub_token_refused() -> dict[str, str]:
    """A choice that is not a hub token: the services' one wording, which echoes no name."""
    return {"invalid_choice": HUB_REFUSAL}


class HubImportForm(forms.Form):
    repo_id = forms.CharField(
        max_length=300, label="Repository", help_text="owner/name on Hugging Face (HF_ENDPOINT for a mirror)."
    )
    revision = forms.CharField(max_length=200, required=False, help_text="Branch, tag or commit; empty = main.")
    file = forms.CharField(
        max_length=300, required=False, label="GGUF file", help_text="For a repository of GGUF quants: the one to use."
    )
    name = forms.CharField(max_length=200, required=False, help_text="Empty = from the repository.")
    token = forms.ChoiceField(
        required=False,
        label="Token",
        help_text="A host secret an admin marked as a Hugging Face token, for gated repositories.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["token"].choices = _token_choices()
        self.fields["token"].error_messages.update(_hub_token_refused())


class ModelDownloadForm(forms.Form):
    model = forms.ModelChoiceField(queryset=None, label="Model")  # type: ignore[arg-type]
    token_secret = forms.ChoiceField(
        required=False, label="Token", help_text="This host's secret an admin marked as a Hugging Face token."
    )

    def __init__(self, *args: Any, host: Host, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["model"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = download_candidates(host=host)
        self.fields["token_secret"].choices = [("", "(none)")] + [
            (s.name, s.name) for s in host.secrets.filter(hub_token=True).order_by("name")
        ]
        self.fields["token_secret"].error_messages.update(_hub_token_refused())


# --- host secrets (admins) ---------------------------------------------------------------------


class SecretForm(forms.Form):
    """Create or rotate a host secret; the value is never rendered back."""

    name = forms.SlugField(max_length=63, help_text="Revisions and imports name it; letters, digits, - and _.")
    value = forms.CharField(
        max_length=4096, strip=False, widget=forms.PasswordInput(render_value=False), help_text="Stored encrypted."
    )
    hub_token = forms.BooleanField(
        required=False,
        label="Hugging Face token",
        help_text="Only secrets marked so are ever sent to a hub (imports, downloads); never an engine API key.",
    )


class SecretMarkForm(forms.Form):
    hub_token = forms.BooleanField(required=False, label="Hugging Face token")


# --- the front door ------------------------------------------------------------------------------


class ServeModeForm(forms.Form):
    """How a host's front door serves one of its revisions (or not at all)."""

    revision = forms.IntegerField(min_value=1, max_value=2**31 - 1, label="Revision number")
    mode = forms.ChoiceField(choices=[*ServeMode.choices, ("off", "Not served")])
    idle_ttl_s = forms.IntegerField(
        required=False, min_value=1, max_value=10**7, label="Idle time (s)", help_text="On demand: unload after."
    )


class AliasForm(forms.Form):
    name = forms.SlugField(max_length=63, help_text="A stable name clients use, e.g. coder.")
    revision = forms.IntegerField(min_value=1, max_value=2**31 - 1, label="Revision number")


class InferenceKeyForm(forms.Form):
    name = forms.SlugField(max_length=63, help_text="Who or what uses it, e.g. aider-alice.")
    models = forms.CharField(
        required=False, max_length=4000, help_text="Names or aliases it may use, comma-separated (empty: every model)."
    )


class InferenceKeyModelsForm(forms.Form):
    models = forms.CharField(required=False, max_length=4000, help_text="Comma-separated; empty: every model.")


class DoorModeForm(forms.Form):
    """The lab's door mode (admins): open, or keys required."""

    mode = forms.ChoiceField(choices=DoorMode.choices)

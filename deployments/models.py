"""Model variants, immutable deployment revisions, what each host serves, operations, benchmarks,
secrets.

`Operation` and its host lock (the unique constraint below) stay here rather than in `core`: an
operation points at the revision it switches to or benchmarks, and a `BenchmarkRun` at its
operation, so moving it down would take revisions with it or leave a foreign key pointing up.
Nothing below `deployments` needs operations: hosts (`hardware`) and the audit trail (`core`) never
name one, and the agent sees them only through the agent API, by id.
"""

from __future__ import annotations

import uuid
from functools import cached_property
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from core.errors import ImmutableError
from core.models import WorkRecord, WrittenOnce
from hardware.models import Host
from serving.arch import ArchFactError, ModelArch, arch_from_facts
from serving.benchmarking.profiles import profile_label
from serving.engines.llamacpp import suggested_chat_template
from serving.planner.inputs import GgufKvFacts, WeightFacts
from serving.planner.weights import estimate_weights
from serving.safety import UnsafeValueError, check_json_value

from .choices import ACTIVE_STATES, Engine, GateState, ModelFormat, ModelPurpose, OperationKind, OperationState


class ModelVariant(models.Model):
    name = models.CharField(max_length=200, unique=True)  # e.g. "Qwen3.8-27B-W4A16-AWQ"
    repo_id = models.CharField(max_length=300, blank=True)  # "philbert440/Qwen3.8-27B-W4A16-AWQ"
    # The repository's commit the facts were read at (an import by repository id); downloads fetch it.
    revision = models.CharField(max_length=64, blank=True)
    # The files a download fetches, as the hub listed them: [{"name", "size", "sha256", "blob_id"}].
    hub_files = models.JSONField(default=list, blank=True)
    gguf_file = models.CharField(max_length=500, blank=True)  # a path on the host, or a file name
    family = models.CharField(max_length=100, blank=True)  # "Qwen3.5"
    generation = models.CharField(max_length=100, blank=True)  # "Qwen3.8"
    format = models.CharField(max_length=10, choices=ModelFormat.choices, default=ModelFormat.HF)
    quantization = models.CharField(max_length=60, blank=True)  # "bf16", "awq-int4", "w4a16", "Q6_K_XL"
    quant_method = models.CharField(max_length=60, blank=True)  # checkpoint's own: "compressed-tensors", "awq"
    weights_bytes = models.BigIntegerField(null=True, blank=True)
    arch = models.JSONField(default=dict, blank=True)  # ModelArch.to_dict(); unknown facts are null
    gguf_kv = models.JSONField(default=dict, blank=True)  # planner.GgufKvFacts.to_dict() from a GGUF header
    quant_bits = models.PositiveSmallIntegerField(null=True, blank=True)
    quant_group_size = models.IntegerField(null=True, blank=True)  # -1: per channel (GPTQ)
    tool_call_parser = models.CharField(max_length=60, blank=True)
    reasoning_parser = models.CharField(max_length=60, blank=True)
    thinking = models.BooleanField(null=True, blank=True)
    sampling_presets = models.JSONField(default=dict, blank=True)  # {"thinking": {...}, "non_thinking": {...}}
    min_engine_versions = models.JSONField(default=dict, blank=True)  # {"vllm": "0.17"}
    mmproj_file = models.CharField(max_length=500, blank=True)
    # A GGUF's own chat template (tokenizer.chat_template): False = the file has none, so chat requests
    # get llama.cpp's ChatML fallback (gibberish for most models); None = not a GGUF, or not known.
    has_chat_template = models.BooleanField(null=True, blank=True)
    # The GGUF's own template formats tool definitions (reads `tools`): False = the file carries no tool
    # format (no template, or one without tools), so clients are not told the model calls tools.
    chat_template_tools = models.BooleanField(null=True, blank=True)
    # What the model is for: chat (instruction-tuned) or completions (a base model, which answers a chat
    # with noise). Guessed at import (serving.purpose.guess_purpose), set by hand in the catalog; the
    # switch's health gate tests a chat or a completion by it.
    purpose = models.CharField(max_length=12, choices=ModelPurpose.choices, default=ModelPurpose.CHAT)
    source = models.TextField(blank=True, help_text="Where these facts come from.")
    is_demo = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["family", "name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Facts typed in the admin or set by any service are held to the importers' rules."""
        if not isinstance(self.arch, dict):
            raise ValidationError({"arch": "Architecture facts are a mapping of fact names to values."})
        unknown = set(self.arch) - set(ModelArch().to_dict())
        if unknown:
            raise ValidationError({"arch": f"Unknown architecture facts: {', '.join(sorted(map(str, unknown)))}"})
        try:
            arch_from_facts(self.arch)
        except ArchFactError as exc:
            raise ValidationError({"arch": str(exc)}) from exc
        if not isinstance(self.hub_files, list) or not all(isinstance(f, dict) for f in self.hub_files):
            raise ValidationError({"hub_files": "The hub's files are a list of objects."})
        try:
            check_json_value(self.hub_files, field="hub_files", max_items=100_000)
        except UnsafeValueError as exc:
            raise ValidationError({"hub_files": str(exc)}) from exc
        for name in ("gguf_kv", "sampling_presets", "min_engine_versions"):
            if not isinstance(getattr(self, name), dict):
                raise ValidationError({name: "This is a mapping (a JSON object)."})
            try:
                check_json_value(getattr(self, name), field=name)
            except UnsafeValueError as exc:
                raise ValidationError({name: str(exc)}) from exc

    @property
    def chat_template_warning(self) -> str:
        """The warning a GGUF without a chat template gets on the catalog and the revision form ("" if none)."""
        if self.has_chat_template is not False:
            return ""
        architecture = self.model_arch.architecture
        builtin = suggested_chat_template(architecture)
        fix = (
            f"Give the revision the knob chat_template: {builtin} (llama.cpp's built-in template for {architecture} "
            "models), or chat_template_file (a .jinja file in the model folders)"
            if builtin
            else "Give the revision chat_template (one of llama.cpp's built-in templates) or chat_template_file "
            "(a .jinja file in the model folders)"
        )
        return (
            f"{self.name}: the GGUF has no chat template (tokenizer.chat_template). llama.cpp then formats chats "
            "as ChatML, which most models answer with gibberish echoing <|im_end|>; the switch refuses such an "
            f"answer. {fix}, or import a GGUF that carries its template. A base model (not instruction-tuned) "
            "answers any template with noise."
        )

    @property
    def model_arch(self) -> ModelArch:
        return ModelArch.from_dict(self.arch)

    @property
    def weight_facts(self) -> WeightFacts:
        """What the planner reads of the weights. Stored facts are read leniently: an implausible
        size is unknown (the planner estimates it), never a crash."""
        size = self.weights_bytes
        return WeightFacts(
            weights_bytes=size if isinstance(size, int) and 0 < size <= 2**50 else None,
            checkpoint_quant=self.quant_method or None,
            quant_bits=self.quant_bits,
            quant_group_size=self.quant_group_size,
            quantization=self.quantization or None,
            gguf=GgufKvFacts.from_dict(self.gguf_kv) if self.gguf_kv else None,
        )

    @cached_property
    def weights_estimate(self) -> Any:
        """The planner's estimate of the weights when no size is known (planner.weights), else None;
        whatever is stored, never an exception."""
        if self.weights_bytes:
            return None
        kv = self.gguf_kv if isinstance(self.gguf_kv, dict) else {}
        file_type = kv.get("file_type") if isinstance(kv.get("file_type"), int) else None
        try:
            return estimate_weights(
                self.model_arch,
                quant_method=self.quant_method or None,
                bits=self.quant_bits,
                group_size=self.quant_group_size,
                quantization=self.quantization or None,
                gguf_file_type=file_type,
            )
        except (ValueError, ArithmeticError, TypeError):
            return None


class HostModel(models.Model):
    """A catalog model's weights on one host's disk, as that host's agent reported them after a
    download it checked against the hub's checksums."""

    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="models_on_disk")
    model_variant = models.ForeignKey(ModelVariant, on_delete=models.CASCADE, related_name="copies")
    path = models.CharField(max_length=1000)  # what the engine opens: the GGUF file, the folder, ollama:<tag>
    repo_id = models.CharField(max_length=300, blank=True)
    revision = models.CharField(max_length=64, blank=True)
    size_bytes = models.BigIntegerField(default=0)
    files = models.JSONField(default=list, blank=True)  # [{"name", "size", "sha256"}] as checked on disk
    verified = models.BooleanField(default=False)  # every file's checksum matched the hub's
    operation = models.ForeignKey(
        "Operation", null=True, blank=True, on_delete=models.SET_NULL, related_name="downloaded_models"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["host", "path"]
        constraints = [
            models.UniqueConstraint(fields=["host", "model_variant"], name="hostmodel_one_copy_per_variant_per_host")
        ]

    def __str__(self) -> str:
        return f"{self.model_variant_id} on {self.host_id} at {self.path}"


class Secret(models.Model):
    """An engine API key or hub token, per host, encrypted at rest; revisions name it only."""

    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="secrets")
    name = models.SlugField(max_length=63)
    ciphertext = models.BinaryField()
    # Set by an admin only: the hub import and downloads send no other secret to a hub.
    hub_token = models.BooleanField(default=False, help_text="An admin marked it as a Hugging Face token.")
    created_at = models.DateTimeField(default=timezone.now)
    rotated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["host", "name"], name="secret_unique_name_per_host")]

    def __str__(self) -> str:
        return f"{self.host.name}/{self.name}"


class DeploymentRevision(WrittenOnce, models.Model):
    """One immutable configuration of a host's engine. A change is a new row."""

    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.RESTRICT, related_name="children")
    engine = models.CharField(max_length=20, choices=Engine.choices)
    engine_version = models.CharField(max_length=40, blank=True)
    model_variant = models.ForeignKey(ModelVariant, on_delete=models.PROTECT, related_name="revisions")
    knobs = models.JSONField(default=dict, blank=True)
    env = models.JSONField(default=dict, blank=True)
    served_name = models.CharField(max_length=200, blank=True)
    port = models.PositiveIntegerField(default=8080)  # llama.cpp's own; never the panel's 8000
    api_key_secret = models.SlugField(max_length=63, blank=True, help_text="Name of the host secret used as API key.")
    hf_token_secret = models.SlugField(max_length=63, blank=True, help_text="Name of the host secret used as HF token.")
    extras = models.JSONField(default=dict, blank=True)  # e.g. variables an import kept but did not understand
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    message = models.TextField()
    tag = models.CharField(max_length=120, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["host", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["host", "number"], name="revision_unique_number_per_host"),
            models.UniqueConstraint(fields=["host", "tag"], condition=~Q(tag=""), name="revision_unique_tag_per_host"),
        ]

    edit_refusal = "A deployment revision is history: create a new revision instead of editing one."

    def __str__(self) -> str:
        return f"{self.host.name} r{self.number}"

    def delete(self, *args: object, **kwargs: object) -> tuple[int, dict[str, int]]:
        if not getattr(self, "_allow_delete", False):
            raise ImmutableError("A deployment revision is history and cannot be deleted.")
        return super().delete(*args, **kwargs)

    @property
    def label(self) -> str:
        return f"r{self.number}" + (f" ({self.tag})" if self.tag else "")


class Deployment(models.Model):
    """What a host serves: the revision its last successful switch applied, the one mutable
    pointer of a host's history. One row per host that was ever switched; a host without a row
    serves nothing. It lives here rather than on `hardware.Host`, so hardware knows nothing of
    revisions (the column was `hardware_host.active_revision_id` until hardware's 0006)."""

    host = models.OneToOneField("hardware.Host", primary_key=True, on_delete=models.CASCADE, related_name="deployment")
    active_revision = models.ForeignKey(
        DeploymentRevision, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The desired state: whether the host should serve its active revision. A switch or Start
    # sets it, Stop clears it; an agent that comes back with no engine running restores the
    # active revision only while it is set (deployments.services.serving).
    serving = models.BooleanField(default=True)

    def __str__(self) -> str:
        wanted = "" if self.serving else " (stopped on purpose)"
        return f"{self.host_id} serves {self.active_revision_id or 'nothing'}{wanted}"


def active_revision_of(host: Host) -> DeploymentRevision | None:
    """The revision `host` serves, or None (no query when the host was read with
    `select_related("deployment__active_revision")`)."""
    deployment = getattr(host, "deployment", None)  # a missing row raises an AttributeError
    return deployment.active_revision if deployment is not None else None


def active_revision_id_of(host: Host) -> int | None:
    """The id of the revision `host` serves, or None (no query after `select_related("deployment")`)."""
    deployment = getattr(host, "deployment", None)
    return deployment.active_revision_id if deployment is not None else None


class RevisionComment(models.Model):
    revision = models.ForeignKey(DeploymentRevision, on_delete=models.CASCADE, related_name="comments")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    body = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"comment on {self.revision_id} by {self.author_id}"


class Operation(WorkRecord):
    """One background job. The row exists before the task; the task id is the row id."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=20, choices=OperationKind.choices)
    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="operations")
    revision = models.ForeignKey(
        DeploymentRevision, null=True, blank=True, on_delete=models.SET_NULL, related_name="operations"
    )
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    exclusive = models.BooleanField(default=True)
    state = models.CharField(max_length=12, choices=OperationState.choices, default=OperationState.QUEUED)
    stage = models.CharField(max_length=120, blank=True)
    progress = models.FloatField(default=0.0)  # 0..1
    log = models.TextField(blank=True)
    params = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    worker = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta(WorkRecord.Meta):
        constraints = [
            # The host lock: at most one exclusive operation queued or running per host.
            models.UniqueConstraint(
                fields=["host"],
                condition=Q(exclusive=True, state__in=list(ACTIVE_STATES)),
                name="operation_one_exclusive_active_per_host",
            )
        ]
        indexes = [models.Index(fields=["host", "-created_at"], name="operation_host_created")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} on {self.host_id} ({self.state})"

    @property
    def celery_task_id(self) -> str:
        return str(self.id)

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES


class BenchmarkRun(WorkRecord):
    revision = models.ForeignKey(DeploymentRevision, on_delete=models.CASCADE, related_name="benchmark_runs")
    operation = models.OneToOneField(Operation, null=True, blank=True, on_delete=models.SET_NULL)
    profile_name = models.CharField(max_length=60)
    profile = models.JSONField(default=dict)
    engine = models.CharField(max_length=20, choices=Engine.choices)
    engine_version = models.CharField(max_length=40, blank=True)
    gpus = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=20, default="running")
    results = models.JSONField(default=dict, blank=True)  # per level and per run aggregates
    raw = models.JSONField(default=list, blank=True)  # per-request timings for plots
    energy_j = models.FloatField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.profile_name} on revision {self.revision_id} ({self.status})"

    @property
    def profile_label(self) -> str:
        """The profile as runs are listed: "quick", or "quick (custom: c=1,2 n=4)" when its numbers differ."""
        return profile_label(self.profile, self.profile_name)


class SwitchGate(WorkRecord):
    """A switch that must prove itself: after its health gate, `profile` runs on the new revision
    and is judged against the previous revision's run of the same profile under `limits`
    ({metric: percent}, serving.benchmarking.gate); beyond a limit, the host rolls back.
    `verdict` keeps the comparison that decided it. Moved on only by deployments.services.gates."""

    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="switch_gates")
    revision = models.ForeignKey(DeploymentRevision, on_delete=models.CASCADE, related_name="+")
    previous = models.ForeignKey(DeploymentRevision, on_delete=models.CASCADE, related_name="+")
    profile = models.JSONField(default=dict)
    limits = models.JSONField(default=dict)
    state = models.CharField(max_length=20, choices=GateState.choices, default=GateState.SWITCHING)
    switch_params = models.JSONField(default=dict, blank=True)  # the switch's own, as switch_request made them
    baseline_op = models.ForeignKey(Operation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    switch_op = models.ForeignKey(Operation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    benchmark_op = models.ForeignKey(Operation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    rollback_op = models.ForeignKey(Operation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    baseline_run = models.ForeignKey(BenchmarkRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    candidate_run = models.ForeignKey(BenchmarkRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    verdict = models.JSONField(default=dict, blank=True)  # serving.benchmarking.gate.GateVerdict.to_dict()
    reason = models.TextField(blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    def __str__(self) -> str:
        return f"gate of r{self.revision_id} on {self.host_id} ({self.state})"

    @property
    def profile_label(self) -> str:
        return profile_label(self.profile, str(self.profile.get("name") or ""))


class EngineLogRun(models.Model):
    """One start of a host's engine (a switch's launch or a watchdog restart) and its log as the
    host's agent sent it: masked on the host, whole lines, the last ENGINE_LOG_RUN_BYTES kept.

    `received` is how far into the host's log file the panel has it (the agent resumes there);
    `lines` counts every line ever received, so followers ask for the lines after a number."""

    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="engine_log_runs")
    key = models.CharField(max_length=80)  # the agent's name for the start: its time and pid
    revision = models.ForeignKey(DeploymentRevision, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    revision_label = models.CharField(max_length=80, blank=True)
    engine = models.CharField(max_length=20, blank=True)
    started_at = models.DateTimeField()
    text = models.TextField(blank=True)
    received = models.BigIntegerField(default=0)
    lines = models.IntegerField(default=0)
    dropped_lines = models.IntegerField(default=0)  # cut from the start to stay within the limit
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-started_at", "-pk"]
        constraints = [models.UniqueConstraint(fields=["host", "key"], name="engine_log_run_once_per_start")]

    def __str__(self) -> str:
        return f"{self.host_id} engine log from {self.started_at:%Y-%m-%d %H:%M:%S}"


# The front door's models live in their own module; importing them here registers them.
from .front_door_models import DoorPolicy, FrontDoor, InferenceKey, ModelAlias, ServedRevision, UsageDay  # noqa: E402, F401
from .hub_import_models import HubImport  # noqa: E402, F401
from .memory_models import MeasuredMemory, OutsideProcess, PlannerErrorPoint  # noqa: E402, F401

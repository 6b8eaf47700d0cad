from django.db import models

from serving import purpose


class Engine(models.TextChoices):
    VLLM = "vllm", "vLLM"
    LLAMACPP = "llama.cpp", "llama.cpp"
    OLLAMA = "ollama", "Ollama"
    SGLANG = "sglang", "SGLang"


class ModelFormat(models.TextChoices):
    HF = "hf", "Hugging Face checkpoint"
    GGUF = "gguf", "GGUF file"
    OLLAMA = "ollama", "Ollama tag"


class ModelPurpose(models.TextChoices):
    """What a model is for (serving.purpose): the switch's health gate tests it."""

    CHAT = purpose.CHAT, "Chat (instruction-tuned)"
    COMPLETIONS = purpose.COMPLETIONS, "Completions (base model)"


class OperationKind(models.TextChoices):
    INSTALL = "install", "Install engine"
    LAUNCH = "launch", "Launch"
    STOP = "stop", "Stop"
    SWITCH = "switch", "Switch"
    ROLLBACK = "rollback", "Rollback"
    BENCHMARK = "benchmark", "Benchmark"
    PROBE = "probe", "Probe"
    DOWNLOAD = "download", "Download model"
    MODEL_DELETE = "model_delete", "Delete model files"


# Kinds that own the host's GPUs while they run: at most one at a time per host.
EXCLUSIVE_KINDS = (
    OperationKind.INSTALL,
    OperationKind.LAUNCH,
    OperationKind.STOP,
    OperationKind.SWITCH,
    OperationKind.ROLLBACK,
    OperationKind.BENCHMARK,
)


class OperationState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    LOST = "lost", "Lost"


ACTIVE_STATES = (OperationState.QUEUED, OperationState.RUNNING)


class ServeMode(models.TextChoices):
    """How the host's front door serves a revision (hostagent.frontdoor.table.Mode's values)."""

    PINNED = "pinned", "Pinned (kept loaded)"
    ON_DEMAND = "on-demand", "On demand (loaded when asked for, unloaded when idle or for room)"


class DoorMode(models.TextChoices):
    """Whether the front doors and the lab router let in requests with no inference key
    (hostagent.frontdoor.keys' OPEN and KEYS_REQUIRED)."""

    OPEN = "open", "Open"
    KEYS_REQUIRED = "keys_required", "Keys required"


class GateState(models.TextChoices):
    """Where a switch's benchmark gate is (deployments.services.gates)."""

    BASELINE = "baseline", "Measuring the previous revision first"
    SWITCHING = "switching", "Switching"
    MEASURING = "measuring", "Measuring the new revision"
    ROLLING_BACK = "rolling_back", "Rolling back"
    PASSED = "passed", "Passed: the new revision stays"
    ROLLED_BACK = "rolled_back", "Failed: rolled back to the previous revision"
    STOPPED = "stopped", "Stopped before a verdict"


GATE_ACTIVE_STATES = (GateState.BASELINE, GateState.SWITCHING, GateState.MEASURING, GateState.ROLLING_BACK)

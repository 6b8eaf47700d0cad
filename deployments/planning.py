"""The planner, fed from the database: a host's GPUs and a variant's facts -> FitReport.

`revision_plan` is the one way to plan a recorded revision (kept by its input, so a poll that
changes nothing plans nothing); `plan_for_values` plans values not recorded yet (a form's preview)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NotRequired, TypedDict, Unpack

from deployments.engine_installs import install_packages, version_at_latest
from deployments.importers.gguf_header import GgufHeaderError, read_gguf_header
from deployments.importers.hf_config import HfConfigError, load_hf_config
from deployments.models import DeploymentRevision, ModelVariant
from deployments.runtime_bridge import launch_knobs, revision_values
from hardware.models import GPU, GpuType, Host
from serving.engines.registry import LATEST
from serving.planner import FitReport, GpuSpec, PlanInputError, PlanRequest, plan
from serving.planner.fit import MAX_GPUS
from serving.planner.memory import planned_bytes_per_gpu
from serving.wire import PlannedMemory


def version_floors(stored: Any) -> dict[str, str]:
    """Minimum engine versions as stored, keeping only text floors (old rows may hold anything)."""
    if not isinstance(stored, dict):
        return {}
    return {k: v for k, v in stored.items() if isinstance(k, str) and isinstance(v, str) and len(v) <= 40}


def _cc(text: str) -> tuple[int, int] | None:
    try:
        major, minor = text.split(".")
        return int(major), int(minor)
    except (ValueError, AttributeError):
        return None


def gpu_spec(gpu: GPU) -> GpuSpec:
    nvlink = bool(gpu.nvlink_active_links) if gpu.nvlink_active_links is not None else False
    return GpuSpec(
        name=gpu.name,
        memory_bytes=gpu.memory_bytes,
        compute_capability=_cc(gpu.compute_capability),
        p2p=gpu.pcie_p2p,
        nvlink=nvlink,
        index=gpu.index,
    )


def gpu_type_specs(gpu_type: GpuType, count: int) -> tuple[GpuSpec, ...]:
    if not 0 <= count <= MAX_GPUS:
        raise PlanInputError(f"a host has 0 to {MAX_GPUS} GPUs, not {count:,}", field="gpu_count")
    return tuple(
        GpuSpec(
            name=gpu_type.name,
            memory_bytes=gpu_type.memory_bytes,
            compute_capability=_cc(gpu_type.compute_capability),
            p2p=gpu_type.pcie_p2p if count > 1 else None,
            nvlink=bool(gpu_type.nvlink) and not gpu_type.is_geforce,
            index=i,
        )
        for i in range(count)
    )


def host_gpu_specs(host: Host) -> tuple[GpuSpec, ...]:
    return tuple(gpu_spec(g) for g in host.gpus.select_related("gpu_type").order_by("index"))


class PlanValues(TypedDict):
    """What the planner reads of a revision (revision_values' names), the host's GPUs aside."""

    model: ModelVariant
    engine: str
    engine_version: NotRequired[str]
    knobs: NotRequired[dict[str, Any] | None]
    env: NotRequired[dict[str, str] | None]


def plan_request(*, gpus: tuple[GpuSpec, ...], **values: Unpack[PlanValues]) -> PlanRequest:
    model, engine, knobs = values["model"], values["engine"], values.get("knobs") or {}
    vision = knobs.get("vision")
    knobs = launch_knobs(engine=engine, model=model, knobs=dict(knobs))  # what the command line carries
    return PlanRequest(
        engine=engine,
        gpus=gpus,
        engine_version=values.get("engine_version", ""),
        knobs=knobs,
        env=dict(values.get("env") or {}),
        vision=vision,
        **variant_facts(model),
    )


def variant_facts(model: ModelVariant) -> dict[str, Any]:
    """Everything a PlanRequest takes from a catalog model: its architecture, its weights, the
    parsers it recommends and the first engine releases that run it."""
    return {
        "arch": model.model_arch,
        **model.weight_facts,
        "recommended_reasoning_parser": model.reasoning_parser or None,
        "recommended_tool_parser": model.tool_call_parser or None,
        "min_engine_versions": version_floors(model.min_engine_versions),
    }


def host_request(host: Host, **values: Unpack[PlanValues]) -> PlanRequest:
    """`plan_request` on `host`: its GPUs, at "latest" the release the host runs at latest (its
    newest install, else its worker's own build), so that a rule about releases judges what will
    run there, not the newest release the panel knows, and the packages the host read in the venv
    of that install (transformers, vllm-gguf-plugin: unknown where it recorded none)."""
    engine, version = values["engine"], values.get("engine_version") or ""
    here = False
    if version.strip() in ("", LATEST):
        values["engine_version"] = version_at_latest(host, engine)
        here = bool(values["engine_version"])
    packages, absent = install_packages(host, engine, version)
    request = plan_request(gpus=host_gpu_specs(host), **values)
    return replace(request, packages=packages, packages_absent=absent, latest_here=here)


def plan_for_values(*, host: Host, **values: Unpack[PlanValues]) -> FitReport:
    """Raises PlanInputError for knobs the planner cannot read."""
    return plan(host_request(host, **values))


def model_source(ref: str) -> dict[str, Any]:
    """A catalog name, a Hugging Face config.json path or a .gguf path -> planner model facts.

    Raises PlanInputError (field "model") when it is none of these or cannot be read.
    """
    variant = ModelVariant.objects.filter(name=ref).first()
    if variant is not None:
        return variant_facts(variant)
    path = Path(ref)
    try:
        if path.suffix == ".gguf":
            imported = read_gguf_header(path)
            return {"arch": imported.arch, "weights_bytes": imported.file_size, "gguf": imported.kv}
        if path.suffix == ".json" or path.is_dir():
            hf = load_hf_config(path / "config.json" if path.is_dir() else path)
            return {  # no size: the planner estimates the weights from the architecture and says so
                "arch": hf.arch,
                "weights_bytes": None,
                "checkpoint_quant": hf.quant.method,
                "quant_bits": hf.quant.bits,
                "quant_group_size": hf.quant.group_size,
            }
    except (OSError, GgufHeaderError, HfConfigError) as exc:
        raise PlanInputError(f"Cannot read {ref}: {exc}", field="model") from exc
    raise PlanInputError(f"{ref!r} is not a catalog model, a config.json or a .gguf file.", field="model")


def weights_and_kv(variant: ModelVariant, report: Any) -> tuple[int | None, int | None]:
    """(weights bytes, KV cache bytes) the engine holds in RAM on a CPU-only host: the variant's
    imported size and the planner's FitReport (or its to_dict()) KV cache; None where unknown."""
    weights = variant.weights_bytes
    kv = report.get("kv_cache_bytes") if isinstance(report, dict) else getattr(report, "kv_cache_bytes", None)
    return weights, kv if isinstance(kv, int) and not isinstance(kv, bool) else None


def planned_ram(report: Any) -> int | None:
    """The RAM the engine holds on a CPU-only host by the planner's whole model (llama.cpp: GGUF, KV
    cache, compute and output buffers, runtime; vLLM's CPU build: weights, KV cache, runtime:
    FitReport.ram_bytes, or its to_dict()), None where the planner has no such figure (then weights
    + KV cache is what is known)."""
    ram = report.get("ram_bytes") if isinstance(report, dict) else getattr(report, "ram_bytes", None)
    return ram if isinstance(ram, int) and not isinstance(ram, bool) and ram > 0 else None


def memory_need(revision: DeploymentRevision, report: Any) -> tuple[int | None, int | None]:
    """`weights_and_kv` of a revision's model (what the agent's order carries to the host)."""
    return weights_and_kv(revision.model_variant, report)


def planned_memory(revision: DeploymentRevision, report: Any) -> dict[str, int]:
    """The planner's bytes per device for `revision` by its `report` ("gpu0".. for the GPUs it
    uses, or "ram" on a CPU-only host); {} when the plan knows no size."""
    if revision.host.cpu_only:
        ram = planned_ram(report)
        if ram is not None:
            return {"ram": ram}
        weights, kv = memory_need(revision, report)
        return {} if weights is None and kv is None else {"ram": (weights or 0) + (kv or 0)}
    per_gpu = planned_bytes_per_gpu(
        report.weights_bytes_per_gpu, report.kv_pool_bytes_per_gpu, report.overheads_per_gpu
    )
    if not per_gpu or not report.gpus_used:
        return {}
    return {f"gpu{i}": per_gpu for i in range(report.gpus_used)}


def planner_refusal(revision: DeploymentRevision, exc: PlanInputError) -> str:
    """Why the planner cannot read `revision`, naming the knob (as a switch to it is refused)."""
    field = f"{exc.field}: " if exc.field and exc.field not in str(exc) else ""
    return f"the planner cannot read r{revision.number}: {field}{exc}"


# --- the one entry point: a revision's plan, planned once per input ----------------------------


@dataclass(frozen=True)
class Plan:
    """The planner's report on a revision; None when it cannot read the revision, with why
    (`refused`, for pages and the door) and the planner's own error (`error`, naming the knob)."""

    report: FitReport | None
    refused: str = ""
    error: PlanInputError | None = None

    def checked(self) -> FitReport:
        """The report; the planner's PlanInputError when it cannot read the revision."""
        if self.report is None:
            raise self.error or PlanInputError(self.refused)
        return self.report


PLANS_KEPT = 512  # plans kept by their input: a poll that changes nothing runs no planner
_plans: OrderedDict[str, FitReport | PlanInputError] = OrderedDict()


def revision_plan(revision: DeploymentRevision) -> Plan:
    """The planner's report for `revision` on its host, planned once per input (the planner is a
    pure function of its PlanRequest: the same request gets the same report). The one way the
    panel plans a revision: the switch, the pages, the API, the set's fit and the door's document."""
    values = revision_values(revision)
    try:
        request = host_request(revision.host, **{name: values[name] for name in PlanValues.__annotations__})
    except PlanInputError as exc:
        return Plan(None, planner_refusal(revision, exc), exc)
    key = repr(request)
    found = _plans.get(key)
    if found is None:
        try:
            found = plan(request)
        except PlanInputError as exc:
            found = exc
        _plans[key] = found
        while len(_plans) > PLANS_KEPT:
            _plans.popitem(last=False)
    else:
        _plans.move_to_end(key)
    if isinstance(found, PlanInputError):
        # A fresh error each time: the kept one raised again would grow its traceback by each raise.
        error = PlanInputError(str(found), field=found.field)
        return Plan(None, planner_refusal(revision, error), error)
    return Plan(found)


def planned(revision: DeploymentRevision, plan_: Plan) -> PlannedMemory:
    """The planner's bytes per device, and on a CPU-only host the weights and KV cache it holds in RAM."""
    weights, kv = memory_need(revision, plan_.report) if revision.host.cpu_only else (None, None)
    devices = planned_memory(revision, plan_.report) if plan_.report is not None else {}
    return PlannedMemory(devices=devices, weights=weights, kv=kv, refused=plan_.refused)


def revision_memory(revision: DeploymentRevision) -> PlannedMemory:
    """`planned` of the revision's own plan: what pages, the API, the preflight and the set's fit
    show (`refused`: why the planner cannot read it, then no bytes)."""
    return planned(revision, revision_plan(revision))

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from deployments.management.cli import BadInput, PanelCommand, bounded_float, bounded_int, get_host, parse_pairs
from deployments.planning import gpu_type_specs, host_gpu_specs, model_source
from hardware.models import GpuType
from serving.planner import GpuSpec, PlanInputError, PlanRequest, plan
from serving.planner.fit import MAX_GPUS
from serving.planner.inputs import GPU_SPLIT_ENGINES

GIB = 1024**3
# One GPU's memory: from 1 GiB to 16 TiB (today's largest GPU has 288 GB).
MIN_GPU_GIB, MAX_GPU_GIB = 1.0, 16_384.0
ENGINES = ("vllm", "llama.cpp", "ollama", "sglang")


class Command(PanelCommand):
    help = (
        "Will this model, with these settings, fit and run on these GPUs? Exit 0 when nothing is an error, "
        "1 when a finding is an error, 2 for bad input."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--model", required=True, help="catalog name, config.json path or .gguf path")
        parser.add_argument("--host")
        parser.add_argument("--gpu-type", help="catalog GPU type, e.g. 'RTX 3090'")
        parser.add_argument("--gpu-memory-gib", type=bounded_float(MIN_GPU_GIB, MAX_GPU_GIB))
        parser.add_argument("--gpu-count", type=bounded_int(1, MAX_GPUS), help=f"1 to {MAX_GPUS}")
        parser.add_argument("--engine", required=True, choices=ENGINES)
        parser.add_argument("--engine-version", default="")
        parser.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **o: Any) -> None:
        gpus = self._gpus(o)
        try:
            facts = model_source(o["model"])
            report = plan(
                PlanRequest(
                    engine=o["engine"],
                    gpus=gpus,
                    engine_version=o["engine_version"],
                    knobs=parse_pairs(o["set"], what="--set", typed=True),
                    **facts,
                )
            )
        except PlanInputError as exc:
            raise BadInput(str(exc)) from exc
        data = report.to_dict()
        if o["json"]:
            self.stdout.write(json.dumps(data, indent=2, default=str))
        else:
            self._print(data)
        if report.has_errors:
            raise CommandError("The planner found errors: this would not run.", returncode=1)

    def _gpus(self, o: dict[str, Any]) -> tuple[GpuSpec, ...]:
        chosen = [bool(o["host"]), bool(o["gpu_type"]), o["gpu_memory_gib"] is not None]
        if sum(chosen) != 1:
            raise BadInput(
                "Give exactly one of --host, --gpu-type with --gpu-count, or --gpu-memory-gib with --gpu-count."
            )
        if o["host"]:
            return host_gpu_specs(get_host(o["host"]))
        count = o["gpu_count"]
        if not count or count < 1:
            raise BadInput("--gpu-count must be 1 or more.")
        if o["gpu_type"]:
            gpu_type = (
                GpuType.objects.filter(short_name__iexact=o["gpu_type"]).first()
                or GpuType.objects.filter(name__iexact=o["gpu_type"]).first()
            )
            if gpu_type is None:
                known = ", ".join(GpuType.objects.values_list("short_name", flat=True))
                raise BadInput(f"No GPU type {o['gpu_type']!r} in the catalog (known: {known}).")
            return gpu_type_specs(gpu_type, count)
        if o["gpu_memory_gib"] <= 0:
            raise BadInput("--gpu-memory-gib must be positive.")
        memory = int(o["gpu_memory_gib"] * GIB)
        return tuple(
            GpuSpec(name=f"{o['gpu_memory_gib']:g} GiB GPU", memory_bytes=memory, index=i) for i in range(count)
        )

    def _print(self, d: dict[str, Any]) -> None:
        def gib(v: Any) -> str:
            return "unknown" if v is None else f"{v / GIB:.2f} GiB"

        def num(v: Any) -> str:
            return "unknown" if v is None else f"{v:,}"

        if d["engine"] in GPU_SPLIT_ENGINES:
            layout = f"TP={d['tensor_parallel_size']} PP={d['pipeline_parallel_size']}"
        else:  # llama.cpp and Ollama have no TP x PP: their split as they name it
            layout = d["layout"]
        self.stdout.write(f"engine {d['engine']}  {layout}  GPUs used {d['gpus_used']}/{d['gpus_present']}")
        self.stdout.write(f"weights per GPU:              {gib(d['weights_bytes_per_gpu'])}")
        self.stdout.write(
            f"KV bytes per token (all/GPU): {num(d['kv_bytes_per_token'])} / {num(d['kv_bytes_per_token_per_gpu'])}"
        )
        self.stdout.write(f"KV cache memory (all GPUs):   {gib(d['kv_cache_bytes'])}")
        self.stdout.write(f"KV pool:                      {num(d['kv_pool_tokens'])} tokens")
        self.stdout.write(f"context (one request):        {num(d['max_model_len'])} tokens")
        self.stdout.write(
            f"full-length sequences at once: {num(d['max_concurrent_full_length'])} "
            f"(max context for one sequence: {num(d['max_context_one_sequence'])})"
        )
        if d.get("ram_bytes") is not None:  # every layer on the CPU: the engine's host RAM, by part
            parts = d["ram_parts"]
            named = ", ".join(
                f"{k.replace('_', ' ')} {gib(parts[k])}"
                for k in ("weights", "kv_cache", "compute_buffer", "output_buffer", "runtime")
            )
            self.stdout.write(f"host RAM (CPU only):          {gib(d['ram_bytes'])} ({named})")
            self.stdout.write(
                f"  and the prompt cache as it fills, up to {gib(parts['prompt_cache_limit'])} (--cache-ram)"
            )
        for f in d["findings"]:
            self.stdout.write(f"{f['severity'].upper():8} {f['code']}: {f['message']}")
            if f.get("fix"):
                self.stdout.write(f"         fix: {f['fix']}")

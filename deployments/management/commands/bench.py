from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from core.context import change_context
from deployments.choices import OperationState
from deployments.forms import MAX_INPUT_TOKENS, MAX_OUTPUT_TOKENS, MAX_REQUESTS, MAX_SLO_MS, parse_levels
from deployments.management.cli import (
    BadInput,
    PanelCommand,
    add_operation_options,
    bounded_float,
    bounded_int,
    follow,
    get_actor,
    get_host,
)
from deployments.models import BenchmarkRun
from deployments.services.benchmarks import benchmark_request, benchmark_summary, profile_from_input


def _levels(text: str) -> list[int] | None:
    try:
        return parse_levels(text)
    except ValidationError as exc:
        raise BadInput(f"--concurrency: {' '.join(exc.messages)}") from None


class Command(PanelCommand):
    help = "Benchmark a host's active revision through the same path as the UI."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", required=True)
        parser.add_argument("--profile", default=None, help="quick, sweep, single-stream, long-context, ...")
        parser.add_argument("--concurrency", default=None, help="levels, e.g. 1,2,4")
        parser.add_argument("--input-tokens", type=bounded_int(1, MAX_INPUT_TOKENS), default=None)
        parser.add_argument("--output-tokens", type=bounded_int(1, MAX_OUTPUT_TOKENS), default=None)
        parser.add_argument("--requests", type=bounded_int(1, MAX_REQUESTS), default=None, help="requests per level")
        parser.add_argument(
            "--goodput",
            nargs="+",
            default=None,
            metavar="KEY:MS",
            help="latency targets for goodput, as vllm bench serve: ttft:500 tpot:50 e2el:20000",
        )
        parser.add_argument("--json", action="store_true", help="print the stored results as JSON (implies --wait)")
        add_operation_options(parser)

    def handle(self, *args: Any, **o: Any) -> None:
        host = get_host(o["host"])
        profile = None
        try:
            profile = profile_from_input(
                name=o["profile"],
                concurrency=_levels(o["concurrency"]) if o["concurrency"] else None,
                input_tokens=o["input_tokens"],
                output_tokens=o["output_tokens"],
                requests=o["requests"],
                slos=_slos(o["goodput"]),
            )
            with change_context("cli"):
                op = benchmark_request(host=host, profile=profile, actor=get_actor(o["user"]))
        except ValidationError as exc:
            raise BadInput("; ".join(exc.messages)) from exc
        if not o["json"]:
            self.stdout.write(f"Benchmark '{profile.name}' of {host.name} r{op.revision.number} queued ({op.pk}).")
        if not (o["wait"] or o["json"]):
            return
        op = follow(op, timeout=o["timeout"], write=(lambda _line: None) if o["json"] else self.stdout.write)
        run = BenchmarkRun.objects.filter(operation=op).select_related("revision").first()
        if o["json"]:
            self.stdout.write(json.dumps(benchmark_summary(run) if run else {"error": op.error}, indent=2))
        elif run is not None:
            for level in benchmark_summary(run)["levels"]:
                self.stdout.write(
                    f"{level['label']:>10}: {level['completed']} ok, {level['failed']} failed, "
                    f"{_f(level['output_tokens_per_s'])} out tok/s, TTFT p50 {_f(level['ttft_ms']['p50'])} ms, "
                    f"TPOT p50 {_f(level['tpot_ms']['p50'])} ms"
                )
        if op.state != OperationState.SUCCEEDED:
            raise CommandError(op.error or f"Benchmark {op.state}.", returncode=1)


SLO_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2e_ms", "e2e": "e2e_ms"}


def _slos(items: list[str] | None) -> dict[str, float] | None:
    if not items:
        return None
    slos = {}
    for item in items:
        key, _, value = item.partition(":")
        try:
            slos[SLO_KEYS[key]] = bounded_float(0.001, MAX_SLO_MS)(value)
        except (KeyError, ValueError, argparse.ArgumentTypeError):
            raise BadInput(
                f"--goodput takes KEY:MS with KEY one of ttft, tpot, e2el and MS from 0.001 to {MAX_SLO_MS:.0f} "
                f"(got {item[:60]!r})."
            ) from None
    return slos


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"

"""Probe this host again (NVML, host facts) and let the panel record what was measured."""

from __future__ import annotations

from hostagent.context import AgentContext
from hostagent.probe import probe_local
from serving.wire import Order

from .outcome import Outcome


def run_probe(ctx: AgentContext, order: Order) -> Outcome:
    answer = ctx.panel.probe(probe_local())
    return Outcome.succeeded({"gpus": answer.gpus, "mismatches": list(answer.mismatches)})

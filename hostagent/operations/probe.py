"""Probe this host again (NVML, host facts) and let the panel record what was measured."""

from __future__ import annotations

from hostagent.context import AgentContext
from hostagent.probe import probe_local
from serving.wire import Order

from .outcome import Outcome


def run_probe(ctx: AgentContext, order: Order) -> Outcome:
    facts, inventory = probe_local()
    answer = ctx.panel.probe(facts=facts, inventory=inventory)
    return Outcome.succeeded({"gpus": answer.get("gpus"), "mismatches": answer.get("mismatches", [])})

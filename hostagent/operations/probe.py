"""Probe this host again (NVML, host facts) and let the panel record what was measured."""

from __future__ import annotations

from typing import Any

from hostagent.context import AgentContext
from hostagent.probe import probe_local


def run_probe(ctx: AgentContext, order: dict[str, Any]) -> None:
    facts, inventory = probe_local()
    answer = ctx.panel.probe(facts=facts, inventory=inventory)
    ctx.panel.finish(
        order["id"],
        state="succeeded",
        result={"gpus": answer.get("gpus"), "mismatches": answer.get("mismatches", [])},
    )

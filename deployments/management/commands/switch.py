from __future__ import annotations

import time
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError, CommandParser

from controlpanel.params import MAX_INT
from core.context import change_context
from deployments.choices import GATE_ACTIVE_STATES, GateState, OperationKind, OperationState
from deployments.management.cli import (
    BadInput,
    PanelCommand,
    add_gate_options,
    add_operation_options,
    bounded_int,
    follow,
    gate_lines,
    gate_option,
    get_actor,
    get_host,
    get_revision,
)
from deployments.models import Operation
from deployments.services.gates import gate_of, gate_params
from deployments.services.switch import PlanRefused, switch_request
from hardware.review import ChangeRequested
from schedules.choices import ChangeKind
from schedules.cli import add_when_options, scheduled_line, when_of
from schedules.services import change_schedule


class Command(PanelCommand):
    help = (
        "Switch a host to a revision. With --wait: exit 0 when it is active and healthy, 3 when it failed "
        "and was rolled back, 4 when it failed and could not roll back, 5 when the host refused it before "
        "stopping anything (the previous engine still serves), 1 when the planner refused it, 2 for bad input. "
        "With --gate PROFILE --max-drop decode=5,ttft_p95=10 the new revision must then hold up under that "
        "benchmark against the previous one; with --wait, 6 when the gate rolled it back, 7 when the gate "
        "stopped before a verdict. "
        "On a host that requires review (--user a person) it opens a change request instead, and exits 0."
        " With --at or --window it is scheduled instead (manage.py schedule list|cancel)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", required=True)
        parser.add_argument("--revision", type=bounded_int(1, MAX_INT), required=True)
        parser.add_argument("--override-reason", default="", help="admin: switch despite planner errors")
        add_gate_options(parser)
        add_operation_options(parser)
        add_when_options(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        host = get_host(options["host"])
        revision = get_revision(host, options["revision"])
        gate = gate_option(options)
        if (later := when_of(options)) is not None:
            if options["wait"]:
                raise BadInput("--wait follows a switch made now, not a scheduled one.")
            params = {"revision": revision.number, "override_reason": options["override_reason"]}
            with change_context("cli"):
                try:
                    params |= gate_params(gate)
                    change = change_schedule(
                        kind=ChangeKind.SWITCH, host=host, params=params, **later, actor=get_actor(options["user"])
                    )
                except ChangeRequested as exc:  # a protected host: the switch (at its time) waits for a review
                    self.stdout.write(" ".join(exc.messages))
                    return
                except ValidationError as exc:
                    raise BadInput("; ".join(exc.messages)) from exc
            self.stdout.write(scheduled_line(change))
            return
        with change_context("cli"):
            try:
                op = switch_request(
                    revision=revision,
                    override_reason=options["override_reason"],
                    gate=gate,
                    actor=get_actor(options["user"]),
                )
            except PlanRefused as exc:
                for f in exc.report.findings:
                    self.stderr.write(f"{f.severity.upper():8} {f.code}: {f.message} Fix: {f.fix}")
                raise CommandError(
                    "The planner refused this switch (an admin may --override-reason).", returncode=1
                ) from exc
            except ChangeRequested as exc:  # a protected host: the switch waits for a review
                self.stdout.write(" ".join(exc.messages))
                return
            except ValidationError as exc:
                raise BadInput("; ".join(exc.messages)) from exc
        what = f"Switch of {host.name} to r{revision.number}"
        if op.kind != OperationKind.SWITCH:
            what = f"The gate's run of the previous revision, before the switch of {host.name} to r{revision.number},"
        op = self.queued(op, what, wait=options["wait"], timeout=options["timeout"])
        if op is None:
            return
        if gate is not None:
            self._follow_gate(op, timeout=options["timeout"])
            return
        if op.state == OperationState.SUCCEEDED:
            self.stdout.write(self.style.SUCCESS(f"{host.name} serves r{revision.number}."))
            return
        if op.result.get("rolled_back"):
            raise CommandError(op.error, returncode=3)
        if op.result.get("refused"):  # the host refused before stopping anything: the old engine serves on
            raise CommandError(op.error, returncode=5)
        raise CommandError(op.error or f"Switch {op.state}.", returncode=4)

    def _follow_gate(self, op: Operation, *, timeout: float | None) -> None:
        """Follow the gate's operations one after the other until it ends; exit as it ended."""
        gate = gate_of(op)
        assert gate is not None
        seen = {op.pk}
        while gate.state in GATE_ACTIVE_STATES:
            steps = (gate.baseline_op, gate.switch_op, gate.benchmark_op, gate.rollback_op)
            step = next((s for s in reversed(steps) if s is not None and s.pk not in seen), None)
            if step is not None:
                seen.add(step.pk)
                self.stdout.write(f"Gate: {step.get_kind_display().lower()} queued as operation {step.pk}.")
                follow(step, timeout=timeout, write=self.stdout.write)
            else:
                time.sleep(0.5)
            gate = gate_of(op) or gate
        for line in gate_lines(gate.verdict):
            self.stdout.write(line)
        if gate.state == GateState.PASSED:
            self.stdout.write(self.style.SUCCESS(f"{gate.host.name} serves r{gate.revision.number}: {gate.reason}."))
            return
        if gate.state == GateState.ROLLED_BACK:
            raise CommandError(
                f"The benchmark gate rolled {gate.host.name} back to r{gate.previous.number}: {gate.reason}",
                returncode=6,
            )
        raise CommandError(f"The benchmark gate stopped before a verdict: {gate.reason}", returncode=7)

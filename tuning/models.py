"""A tuning run and its trials: what the panel measured while it searched a host's settings.

A run holds one host from its start to its end (a partial unique constraint: one open run per
host). Its trials are numbered in the order they were taken; trial 0 is the base revision itself,
measured first and again at the end (its rounds are what the winner is held against). A trial
runs the base's engine or, where the run's space names them, another engine.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.models import WorkRecord
from hardware.models import ApprovedChange
from serving.tuning.objective import mean_figures


class TuningRun(WorkRecord, ApprovedChange):
    class State(models.TextChoices):
        RUNNING = "running", "Running"
        RESTORING = "restoring", "Going back to the base revision"
        SUCCEEDED = "succeeded", "Finished"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    class Stage(models.TextChoices):
        BASE = "base", "Measuring the base revision"
        TRIALS = "trials", "Measuring candidates"
        REPEATS = "repeats", "Repeating the best to rule out noise"
        RESTORE = "restore", "Going back to the base revision"
        DONE = "done", "Done"

    OPEN = (State.RUNNING, State.RESTORING)

    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="tuning_runs")
    base = models.ForeignKey("deployments.DeploymentRevision", on_delete=models.PROTECT, related_name="+")
    space = models.JSONField(default=dict, help_text="{knob: [values]}, as the engine's knob specs normalise them.")
    engines = models.JSONField(
        default=dict, blank=True, help_text="Other engines tried: {engine: {knob: [values]}} ({}: at its defaults)."
    )
    objective = models.JSONField(default=dict, help_text='{"metric": ..., "level": ...} (serving.tuning.Objective).')
    limits = models.JSONField(default=list, help_text="[serving.tuning.Limit.to_dict()]")
    profile = models.JSONField(default=dict, help_text="The benchmark profile every round runs.")
    max_trials = models.PositiveSmallIntegerField(default=8, help_text="Candidates measured at most (base aside).")
    max_minutes = models.PositiveIntegerField(default=60, help_text="No candidate starts after this many minutes.")
    repeats = models.PositiveSmallIntegerField(default=3, help_text="Rounds the best few and the base get in all.")
    repeat_best = models.PositiveSmallIntegerField(default=2, help_text="How many of the best are repeated.")
    seed = models.IntegerField(default=0)
    state = models.CharField(max_length=12, choices=State.choices, default=State.RUNNING)
    stage = models.CharField(max_length=10, choices=Stage.choices, default=Stage.BASE)
    reason = models.TextField(blank=True, help_text="Why it failed or stopped; the verdict's summary otherwise.")
    cancel_requested = models.BooleanField(default=False)
    # The operation it waits for (a switch, a benchmark, the switch back) and the trial it is for.
    current_op = models.ForeignKey(
        "deployments.Operation", null=True, blank=True, on_delete=models.SET_NULL, related_name="tuning_runs"
    )
    current_trial = models.ForeignKey("TuningTrial", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    best = models.ForeignKey("TuningTrial", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # serving.tuning.Verdict.to_dict() of the best trial against the base, once it ended.
    verdict = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    # change_request, approved_by (ApprovedChange): the approved request it started from.

    class Meta(WorkRecord.Meta):
        constraints = [
            models.UniqueConstraint(
                fields=["host"], condition=Q(state__in=["running", "restoring"]), name="tuningrun_one_open_per_host"
            )
        ]

    def __str__(self) -> str:
        return f"tuning run {self.pk} on host {self.host_id}"

    @property
    def is_open(self) -> bool:
        return self.state in self.OPEN

    @property
    def deadline(self) -> datetime:
        return self.created_at + timedelta(minutes=self.max_minutes)


class TuningTrial(WorkRecord):
    class State(models.TextChoices):
        REFUSED = "refused", "Refused by the planner: never started"
        SWITCHING = "switching", "Switching to it"
        MEASURING = "measuring", "Measuring"
        MEASURED = "measured", "Measured"
        RULED_OUT = "ruled_out", "Ruled out by a limit (stopped early)"
        FAILED = "failed", "Failed"

    run = models.ForeignKey(TuningRun, on_delete=models.CASCADE, related_name="trials")
    number = models.PositiveSmallIntegerField()  # 0: the base revision
    knobs = models.JSONField(default=dict, help_text="The candidate: the knobs it sets on the base's.")
    # The engine it ran: the base's (its knobs set on the base's), or another (its knobs from none).
    engine = models.CharField(max_length=20, blank=True)
    revision = models.ForeignKey(
        "deployments.DeploymentRevision", null=True, blank=True, on_delete=models.SET_NULL, related_name="tuning_trials"
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.SWITCHING)
    reason = models.TextField(blank=True, help_text="Why the planner refused it, a limit ruled it out or it failed.")
    # One entry per round: {"run": BenchmarkRun id, "figures": run_figures(...), "value": objective value}.
    rounds = models.JSONField(default=list, blank=True)
    value = models.FloatField(null=True, blank=True, help_text="The objective, the mean of its rounds.")
    passed = models.BooleanField(null=True, blank=True, help_text="Met every limit (None: not measured).")
    planned_memory = models.JSONField(default=dict, blank=True, help_text="{device: bytes} the planner said.")
    measured_memory = models.JSONField(default=dict, blank=True, help_text="{device: peak bytes} the host held.")
    findings = models.JSONField(
        default=list, blank=True, help_text="The planner's findings: [{severity, code, message}]."
    )

    class Meta:
        ordering = ["run", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="tuningtrial_unique_number")]

    def __str__(self) -> str:
        return f"trial {self.number} of tuning run {self.run_id}"

    @property
    def is_base(self) -> bool:
        return self.number == 0

    def figures(self) -> dict[str, Any]:
        """The mean of its rounds' figures ({} before one)."""
        return mean_figures([r.get("figures") or {} for r in self.rounds if isinstance(r, dict)])

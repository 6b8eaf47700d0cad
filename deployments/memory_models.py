"""Memory planned against measured (docs/operators-guide.md#memory-planned-against-measured): what
each revision's engine held on each device while it ran, as its host's agent measured it (NVML's
per-process bytes per GPU, or resident memory on a CPU host), and the memory held by processes the
panel did not start.

Bounded by design: one row per revision and device (the latest reading and the peak), a trend
point per revision and device at most every TREND_EVERY (a host keeps its TREND_KEEP newest),
and each host's outside processes as of its last report. Imported by `deployments.models`.
"""

from __future__ import annotations

from django.db import models


class MeasuredMemory(models.Model):
    """What one revision's engine held on one device (`gpu0`.., or `ram` on a CPU host): the
    latest reading and the peak since it was first measured, beside the planner's figure then."""

    revision = models.ForeignKey(
        "deployments.DeploymentRevision", on_delete=models.CASCADE, related_name="measured_memory"
    )
    device = models.CharField(max_length=16)
    planned_bytes = models.BigIntegerField(null=True, blank=True, help_text="The planner's bytes at the last reading.")
    latest_bytes = models.BigIntegerField()
    latest_at = models.DateTimeField()
    peak_bytes = models.BigIntegerField()
    peak_at = models.DateTimeField()
    readings = models.PositiveIntegerField(default=1)

    class Meta:
        ordering = ["revision", "device"]
        constraints = [models.UniqueConstraint(fields=["revision", "device"], name="measured_memory_once")]

    def __str__(self) -> str:
        return f"revision {self.revision_id} {self.device}: {self.latest_bytes} bytes"


class PlannerErrorPoint(models.Model):
    """One point of a host's planner-error trend: planned and measured bytes of a revision on a
    device at one time (measured minus planned, over planned, is the error the host page plots)."""

    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="planner_error_points")
    revision = models.ForeignKey(
        "deployments.DeploymentRevision", on_delete=models.CASCADE, related_name="planner_error_points"
    )
    device = models.CharField(max_length=16)
    ts = models.DateTimeField()
    planned_bytes = models.BigIntegerField()
    measured_bytes = models.BigIntegerField()

    class Meta:
        ordering = ["host", "ts"]
        indexes = [models.Index(fields=["host", "ts"], name="planner_error_host_ts")]

    def __str__(self) -> str:
        return f"{self.host_id} r{self.revision_id} {self.device} @ {self.ts:%Y-%m-%d %H:%M}"


class OutsideProcess(models.Model):
    """A process the panel did not start that held GPU memory in the host's last report."""

    host = models.ForeignKey("hardware.Host", on_delete=models.CASCADE, related_name="outside_processes")
    pid = models.PositiveIntegerField()
    name = models.CharField(max_length=64)
    gpu_index = models.PositiveSmallIntegerField()
    bytes = models.BigIntegerField()
    seen_at = models.DateTimeField()

    class Meta:
        ordering = ["host", "gpu_index", "-bytes"]

    def __str__(self) -> str:
        return f"pid {self.pid} ({self.name}) on GPU {self.gpu_index}"

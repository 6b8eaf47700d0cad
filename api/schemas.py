"""The API's bodies, as django-ninja (pydantic) schemas: what goes into the OpenAPI document."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from django.core.exceptions import ValidationError
from ninja import Field, Schema

from deployments.services.gates import gate_from_input

if TYPE_CHECKING:
    from deployments.services.gates import GateRequest


class Error(Schema):
    detail: str
    errors: dict[str, list[str]] | None = None


class GpuOut(Schema):
    index: int
    name: str
    memory_bytes: int
    util_pct: float | None = None
    mem_used_bytes: int | None = None
    power_w: float | None = None
    temp_c: float | None = None
    sampled_at: datetime | None = None


class OperationOut(Schema):
    id: str
    kind: str
    host: str
    revision: int | None
    state: str
    ended: bool
    outcome: str = Field(description="In words: 'Succeeded', 'Failed, rolled back', ...")
    stage: str
    progress: float
    error: str
    result: dict[str, Any] = Field(
        description="In full up to 64 KiB; a larger one is {truncated, bytes, excerpt, note}."
    )
    requested_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    url: str
    benchmark: int | None = Field(None, description="A benchmark operation's run, once it has started.")
    gate: dict[str, Any] | None = Field(
        None,
        description="The switch's benchmark gate this operation is a step of (one operation's answers only): "
        "state, profile, limits, the operations and runs, and the comparison that decided it (`verdict`).",
    )


# What an endpoint that queues an operation answers: 202 with the operation to follow; 400 bad
# input, 403 a role too low, 404 no such host, 409 the host busy or the planner refusing.
OPERATION_QUEUED: dict[int, Any] = {202: OperationOut, 400: Error, 403: Error, 404: Error, 409: Error}


class OperationLog(Schema):
    id: str
    state: str
    log: str


class HostOut(Schema):
    name: str
    address: str
    queue: str
    online: bool
    offline_reason: str
    cpu_only: bool
    demo: bool
    last_heartbeat: datetime | None
    active_revision: int | None
    serving: bool
    serving_status: str
    engine_state: dict[str, Any]
    engine_metrics: dict[str, Any]
    gpus: list[GpuOut]
    gpus_more: int = Field(0, description="The host's GPUs past those listed (the first 64 by index).")
    operation: OperationOut | None


class HostList(Schema):
    items: list[HostOut]
    count: int


class HostEventOut(Schema):
    id: int
    kind: str = Field(description="agent.restarted, watchdog.restarted, door.table_refused, door.down, door.up, ...")
    label: str
    severity: str = Field(description="As its notification says it: info, success, warning or failure")
    at: datetime
    summary: str
    reason: str = Field(description="The host's own words (secrets masked)")
    revision: str = Field(description="What served then: 'r5', or empty")


class HostEventList(Schema):
    items: list[HostEventOut]
    count: int = Field(description="Every event of the host that matches, not only those listed")


class ModelOut(Schema):
    name: str
    repo_id: str
    gguf_file: str
    family: str
    generation: str
    format: str
    quantization: str
    weights_bytes: int | None
    arch: dict[str, Any]
    demo: bool


class ModelList(Schema):
    items: list[ModelOut]
    count: int


class RevisionOut(Schema):
    host: str
    number: int
    parent: int | None
    engine: str
    engine_version: str
    model: str
    knobs: dict[str, Any]
    env: dict[str, Any]
    served_name: str
    port: int | None
    api_key_secret: str | None = Field(None, description="The secret's name, never its value.")
    hf_token_secret: str | None = None
    tag: str
    message: str
    author: str | None
    created_at: datetime
    active: bool
    argv: list[str] = Field(description="The command line the host runs, secrets masked.")


class RevisionList(Schema):
    items: list[RevisionOut]
    count: int


class RevisionIn(Schema):
    engine: str | None = Field(None, description="Default: the parent's engine.")
    engine_version: str | None = None
    model: str | None = Field(None, description="A model's name from /models/. Default: the parent's.")
    knobs: dict[str, Any] | None = Field(None, description="Replaces the parent's knobs when given.")
    set: dict[str, Any] | None = Field(None, description="Knobs changed from the parent's (null removes one).")
    env: dict[str, str] | None = None
    served_name: str | None = None
    port: int | None = None
    api_key_secret: str | None = None
    hf_token_secret: str | None = None
    tag: str = ""
    message: str
    parent: int | None = Field(None, description="Start from this revision (default: the newest).")


class DiffRowOut(Schema):
    key: str
    old: str
    new: str
    kind: str
    note: str


class DiffSectionOut(Schema):
    key: str
    title: str
    rows: list[DiffRowOut]


class DiffOut(Schema):
    old: str
    new: str
    model_changed: bool
    sections: list[DiffSectionOut]


class GateIn(Schema):
    profile: str = Field(description="The named benchmark profile the gate runs (quick, single-stream, ...).")
    max_drop: dict[str, float] = Field(
        description="Limits in percent per figure: decode and throughput at most that much below the previous "
        'revision\'s run, ttft_p95 and j_per_token at most that much above, e.g. {"decode": 5, "ttft_p95": 10}.'
    )

    def request(self) -> GateRequest:
        """The gate as switch_request and rollout_start take it (ValidationError on bad input)."""
        return gate_from_input(profile=self.profile, limits=self.max_drop)


class SwitchIn(Schema):
    revision: int
    override_reason: str = Field("", description="Admins only: switch despite planner errors, with a reason.")
    gate: GateIn | None = Field(
        None,
        description="A benchmark gate: after the health gate the profile runs on the new revision and a "
        "regression beyond a limit rolls back; the answer is the gate's first operation (the switch, or the "
        "previous revision's run of the profile when it has none).",
    )


class BenchmarkIn(Schema):
    profile: str | None = Field(None, description="A named profile (quick, standard, ...) or none for custom.")
    concurrency: list[int] | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    requests: int | None = None
    request_rate: float | None = None
    slos: dict[str, float] | None = Field(None, description='Goodput SLOs, e.g. {"ttft_ms": 500, "tpot_ms": 50}.')


class BenchmarkOut(Schema):
    id: int
    host: str
    revision: int
    profile: dict[str, Any]
    status: str
    created_at: datetime
    summary: dict[str, Any]
    results: dict[str, Any]


class BenchmarkCompareOut(Schema):
    a: int
    b: int
    rows: list[dict[str, Any]]


ExportTarget = Literal[
    "opencode",
    "hermes",
    "aider-settings",
    "aider-metadata",
    "claude-code",
    "codex",
    "start-script",
    "systemd",
    "ansible",
]  # deployments.services.exports.TARGETS (a test keeps them equal)
ExportVia = Literal["router", "door"]  # deployments.services.exports.VIA


class ExportOut(Schema):
    target: str
    filename: str
    content: str
    notes: list[str] = Field(default_factory=list, description="What the file could not say, one line each.")


# --- the front door ------------------------------------------------------------------------------


class ServedOut(Schema):
    revision: int
    name: str = Field(description="The front door's name for it: <served name>-r<number>.")
    mode: Literal["pinned", "on-demand"]
    idle_ttl_s: int | None
    active: bool = Field(description="The host's active revision: always served, pinned.")
    aliases: list[str]
    phase: str | None = Field(None, description="As the host's front door last reported it.")
    in_flight: int | None = None
    waiting: int | None = None
    memory_planned: dict[str, int] = Field(description="The planner's bytes per device (gpu0.. or ram).")
    planner_refused: str = Field(
        "", description="Why the planner cannot read the revision, naming the knob ('' when it can); no bytes then."
    )


class ServingList(Schema):
    items: list[ServedOut]
    count: int
    reported_at: datetime | None = Field(description="When the front door last reported.")


class ServeIn(Schema):
    mode: Literal["pinned", "on-demand", "off"]
    idle_ttl_s: int | None = Field(None, ge=1, le=10**7, description="On demand: unload after this long unused.")


class AliasOut(Schema):
    name: str
    revision: int


class AliasList(Schema):
    items: list[AliasOut]
    count: int


class AliasIn(Schema):
    revision: int = Field(ge=1, le=2**31 - 1)


class KeyOut(Schema):
    name: str
    prefix: str
    models: list[str] | None = Field(description="Names or aliases it may use; null: every model.")
    created_at: datetime
    created_by: str | None
    revoked_at: datetime | None


class KeyCreated(KeyOut):
    secret: str = Field(description="The key itself: shown this once, never again.")


class KeyList(Schema):
    items: list[KeyOut]
    count: int


class KeyIn(Schema):
    name: str = Field(max_length=63)
    models: list[str] | None = Field(None, max_length=100)


class UsageOut(Schema):
    day: str | None = None
    key: str | None = None
    host: str | None = None
    model: str | None = None
    revision: int | None = None
    requests: int
    prompt_tokens: int
    completion_tokens: int
    errors: int


class UsageList(Schema):
    items: list[UsageOut]
    count: int
    days: int


class WhenIn(Schema):
    """`at` or `window`: the change runs then, not now (as change_schedule takes it); a change request
    once approved. The bodies of /changes/, /schedules/ and /rollouts/."""

    at: datetime | None = Field(
        None, description="It runs then, not now: a time with its zone (e.g. 2026-12-05T02:00Z); or `window`."
    )
    window: bool = Field(
        False,
        description="It runs in the next maintenance window (the host's; a rollout's: its canary's), the one open "
        "now if it is; or `at`.",
    )

    def schedule(self) -> dict[str, Any]:
        """change_schedule's `at` or `in_window`: one of the two, or refused."""
        if (self.at is None) == (not self.window):
            raise ValidationError({"at": "Give `at` (a time with its zone) or `window: true`, one of the two."})
        return {"at": self.at} if self.at is not None else {"in_window": True}

    def when(self) -> dict[str, Any] | None:
        """schedule(), or None when neither is given: now."""
        if self.at is None and not self.window:
            return None
        if self.at is not None and self.window:
            raise ValidationError({"at": "Give `at` (a time with its zone) or `window: true`, not both."})
        return self.schedule()


# --- change requests (changes/) -----------------------------------------------------------------


class ChangeCommentOut(Schema):
    author: str | None
    verdict: str
    body: str
    created_at: datetime


class ChangeOut(Schema):
    id: int
    host: str
    kind: str = Field(description="switch, alias, serving or rollout")
    params: dict[str, Any] = Field(
        description="What the change runs: revision, and name / mode / override_reason (a rollout: group, kind, "
        "change, batch_size, canary); `when` when it runs at a time once approved"
    )
    summary: str
    state: str = Field(
        description="open, changes_requested, approved, rejected, withdrawn, or stale (approved with a time, it "
        "did not run when due: what it covered differed; its author re-confirms it)"
    )
    author: str | None
    decided_by: str | None
    stale: list[str] = Field(
        description="How the host, or the hosts and revisions it covers, changed since it was proposed ([]: not stale)"
    )
    bound: list[dict[str, Any]] = Field(
        [],
        description="What an approval covers, exactly: each host (host id, name, protected, wave for a rollout) with "
        "the revision it gets (revision) or, for a rollout's new revision, the one it derives from (from); `gets` "
        "says it in words",
    )
    operation: str | None = Field(description="The operation an approved switch queued")
    rollout: int | None = Field(None, description="The rollout an approved rollout request started")
    scheduled: int | None = Field(None, description="The scheduled change an approved request with a time became")
    created_at: datetime
    decided_at: datetime | None
    url: str
    comments: list[ChangeCommentOut] = []


class ChangeList(Schema):
    items: list[ChangeOut]
    count: int


class ChangeIn(WhenIn):
    host: str
    kind: str = Field(description="switch, alias or serving")
    revision: int
    name: str = Field("", description="alias: the alias to create or move")
    mode: str = Field("", description="serving: pinned, on-demand or off")
    idle_ttl_s: int | None = Field(None, description="serving: unload after this many idle seconds")
    override_reason: str = Field("", description="switch, admins only: despite planner errors")


class DecisionIn(Schema):
    comment: str = ""


class VerdictIn(Schema):
    verdict: str = Field(description="comment, approve, request_changes, reject, reconfirm or withdraw")
    comment: str = ""


CHANGE_ANSWERS: dict[int, Any] = {200: ChangeOut, 400: Error, 403: Error, 404: Error, 409: Error}


# --- scheduled changes ----------------------------------------------------------------------------


class ScheduleIn(WhenIn):
    kind: Literal["switch", "alias"] = Field(description="What to change: a switch, or an alias move.")
    host: str = Field(max_length=100)
    revision: int = Field(ge=1, le=2**31 - 1)
    name: str = Field("", max_length=63, description="The alias to move (kind alias).")
    override_reason: str = Field("", max_length=1000, description="Admins only (kind switch): despite planner errors.")


class ScheduledOut(Schema):
    id: int
    kind: str
    host: str
    change: str  # in words: "switch to r5"
    params: dict[str, Any]
    run_at: datetime
    run_until: datetime
    in_window: bool
    state: str
    scheduled_by: str | None
    attempts: int
    last_error: str
    outcome: str
    operation: str | None  # the id of the operation it queued
    finished_at: datetime | None
    change_request: int | None = Field(None, description="The approved change request it runs (a protected host)")
    approved_by: str | None = Field(None, description="Who approved that request")


class ScheduleList(Schema):
    items: list[ScheduledOut]
    count: int

"""Tuning runs: start one, move it on as its operations end, cancel it, resume it, propose its best.

A run is a chain of ordinary operations on the host's queue, one at a time, each asked for through
the service a person would use, so each carries its usual checks:

    base: the base revision measured (a switch to it first when the host serves another)
    trials: each candidate of the search (serving.tuning.next_candidate: knobs of the base's engine,
        or of another engine the run's space names), planned first with its engine: one the
        planner refuses is stored with its findings and never started; one that fits becomes a
        revision derived from the base (revision_derive: its parent is the base, its message names
        the run; another engine's starts from that engine's defaults and its newest install, serving
        the base's context on the base's GPU split: `_changes`),
        switched to (switch_request: preflight, health gate, rollback) and benchmarked (a
        BenchmarkRun of the run's profile; the load generator opens every prompt with a token of
        its own, so no round is served from what an earlier one left in the engine's cache). A
        candidate whose first round breaks a limit is stopped there (ruled out).
    repeats: the best few and the base measured again until each has `repeats` rounds, so the
        winner is held against the base beyond the rounds' own noise (serving.tuning.verdict).
    restore: a switch back to the base unless the host serves it already; then the run ends.

Each step is taken when the operation before it ends (`operation_ended`, receivers.py), under the
run's row lock; the operation it waits for is `current_op`. Beat's sweep (`tuning_sweep`) takes a
step an end did not take (a panel restarted between an operation's end and its signal), so a run
resumes after a restart of the panel. An operation lost to a restarted agent, a refusal or a cancel
sends the run to restore: the host goes back to the base revision whatever happened.

On a host that requires review the run starts only from an approved change request (kind `tuning`):
`tuning_start` opens one instead (ChangeRequested), and every switch the run makes carries the
approval.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from controlpanel.roles import OPERATOR, ensure_role
from core.audit import audit_record
from deployments.choices import ACTIVE_STATES, OperationKind, OperationState
from deployments.memory_models import MeasuredMemory
from deployments.models import BenchmarkRun, DeploymentRevision, Operation, active_revision_of
from deployments.planning import plan_for_values, planned_memory
from deployments.runtime_bridge import revision_spec
from deployments.services.benchmarks import benchmark_enqueue, profile_from_input
from deployments.services.operations import operation_cancel
from deployments.services.preflight import host_engines
from deployments.services.revisions import revision_derive
from deployments.services.switch import switch_request
from hardware.models import Host
from hardware.review import (
    Approval,
    ChangeRequested,
    approval_stamp,
    review_asked,
    review_check,
    review_required,
    reviewed,
)
from notifications.events import error_line
from rollouts.models import Rollout
from rollouts.services import rollout_start
from serving.benchmarking.gate import run_figures
from serving.benchmarking.profiles import BenchmarkProfile
from serving.engines.base import EngineConfigError
from serving.engines.registry import ADAPTERS, engine_label, get_adapter
from serving.launch import derive
from serving.planner import PlanInputError
from serving.tuning import (
    Candidate,
    Limit,
    Objective,
    SearchSpace,
    Tried,
    TuningInputError,
    engine_refusal,
    limit_breaks,
    limits_from_input,
    next_candidate,
    objective_value,
    ranked,
    space_check,
    verdict,
)
from serving.tuning.objective import Scored
from serving.tuning.search import COMPLETE, FAILED, PRUNED

from .models import TuningRun, TuningTrial

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

log = logging.getLogger("controlpanel.tuning")

REVIEW_KIND = "tuning"  # changes.choices.ChangeKind.TUNING
MAX_TRIALS, MAX_MINUTES, MAX_REPEATS, MAX_REPEAT_BEST = 64, 24 * 60, 10, 5
REFUSALS_PER_TRIAL = 4  # candidates the planner may refuse per trial of the budget before the search stops
MAX_STEPS = 256  # steps one call takes at most (each refusal is one): a bound, never reached in use
T = TuningTrial.State


# --- starting ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TuningRequest:
    """A run's input, checked (tuning_request): what it stores and what a change request keeps."""

    base: DeploymentRevision
    space: SearchSpace
    objective: Objective
    limits: tuple[Limit, ...]
    profile: BenchmarkProfile
    max_trials: int
    max_minutes: int
    repeats: int
    repeat_best: int
    seed: int

    def params(self) -> dict[str, Any]:
        """As a change request keeps it (its `revision`: the base, which its binding shows)."""
        others = {"engines": self.space.engines_dict()} if self.space.others else {}
        return {
            "revision": self.base.number,
            "space": self.space.to_dict(),
            **others,
            "objective": self.objective.metric,
            "level": self.objective.level,
            "limits": [limit.to_dict() for limit in self.limits],
            "profile": self.profile.to_dict(),
            "max_trials": self.max_trials,
            "max_minutes": self.max_minutes,
            "repeats": self.repeats,
            "repeat_best": self.repeat_best,
            "seed": self.seed,
        }

    def summary(self) -> str:
        return (
            f"Tune {self.base.host.name} from r{self.base.number}: {self.objective.describe()} over "
            f"{self.space.describe()}"
            f" ({self.space.size()} candidates, at most {self.max_trials} measured)"
        )


def other_engines(*, host: Host, base: DeploymentRevision) -> list[str]:
    """The engines besides the base's a run from `base` may try on `host`: each one whose adapter
    loads the base's model format and that the host has installed (tuning_request's rule)."""
    installed, fmt = host_engines(host), base.model_variant.format
    return [e for e in sorted(ADAPTERS) if not engine_refusal(base.engine, e, model_format=fmt, installed=installed)]


def _whole(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationError({name: f"{name} is a whole number from {low} to {high}, not {value!r}."})
    return value


def _profile(profile: str | BenchmarkProfile | Mapping[str, Any]) -> BenchmarkProfile:
    if isinstance(profile, BenchmarkProfile):
        return profile
    if isinstance(profile, str):
        return profile_from_input(name=profile)
    try:
        return BenchmarkProfile.from_dict(profile)
    except (TypeError, ValueError) as exc:
        raise ValidationError({"profile": str(exc)}) from exc


def tuning_request(
    *,
    host: Host,
    space: Mapping[str, Sequence[Any]],
    engines: Mapping[str, Mapping[str, Sequence[Any]]] | None = None,
    objective: str = "throughput",
    level: str = "",
    limits: str | Sequence[Mapping[str, Any]] = "",
    profile: str | BenchmarkProfile | Mapping[str, Any] = "quick",
    base: DeploymentRevision | None = None,
    max_trials: int = 8,
    max_minutes: int = 60,
    repeats: int = 3,
    repeat_best: int = 2,
    seed: int = 0,
) -> TuningRequest:
    """The input of a run checked; ValidationError naming the field otherwise. `level`: the load
    level the objective and the per-level limits are judged at (default: the profile's last).
    `engines`: other engines to try ({engine: {knob: [values]}}), each only where its adapter loads
    the base's model format and the host has it installed (refused naming the engine otherwise)."""
    base = base or active_revision_of(Host.objects.select_related("deployment__active_revision").get(pk=host.pk))
    if base is None:
        raise ValidationError({"base": f"{host.name} serves nothing: switch it to the revision to tune from first."})
    if base.host_id != host.pk:
        raise ValidationError({"base": f"r{base.number} is another host's revision."})
    bench = _profile(profile)
    labels = bench.level_labels()
    try:
        checked = space_check(
            base.engine,
            space,
            engines=engines,
            model_format=base.model_variant.format,
            installed=host_engines(host) if engines else None,
        )
        goal = Objective.from_input(objective, level or labels[-1])
        bounds = limits_from_input(limits, level=goal.level)
    except TuningInputError as exc:
        field = "engines" if exc.field.startswith("engines") else exc.field
        raise ValidationError({field if field in ("objective", "limits", "engines") else "space": str(exc)}) from None
    for lvl in [goal.level, *(b.level for b in bounds)]:
        if lvl != "run" and lvl not in labels:
            raise ValidationError(
                {"level": f"The profile '{bench.name}' has no level {lvl!r}; it measures {', '.join(labels)}."}
            )
    return TuningRequest(
        base=base,
        space=checked,
        objective=goal,
        limits=bounds,
        profile=bench,
        max_trials=_whole(max_trials, "max_trials", 1, MAX_TRIALS),
        max_minutes=_whole(max_minutes, "max_minutes", 1, MAX_MINUTES),
        repeats=_whole(repeats, "repeats", 1, MAX_REPEATS),
        repeat_best=_whole(repeat_best, "repeat_best", 0, MAX_REPEAT_BEST),
        seed=_whole(seed, "seed", 0, 2**31 - 1),
    )


@reviewed
@transaction.atomic
def tuning_start(
    *, host: Host, actor: AbstractUser | None, approval: Approval | None = None, **request: Any
) -> TuningRun:
    """Start a tuning run on `host` (tuning_request's arguments) and queue its first operation.

    Refused with nothing changed on bad input, when the host has an open run or is busy. On a host
    that requires review it opens a change request for the run instead (ChangeRequested);
    `approval`: that request approved, recorded on the run and carried by each of its switches."""
    ensure_role(actor, OPERATOR)
    checked = tuning_request(host=host, **request)
    review_check(
        host=host, kind=REVIEW_KIND, params=checked.params(), summary=checked.summary(), actor=actor, approval=approval
    )
    run = TuningRun(
        host=host,
        base=checked.base,
        space=checked.space.to_dict(),
        engines=checked.space.engines_dict(),
        objective=checked.objective.to_dict(),
        limits=[limit.to_dict() for limit in checked.limits],
        profile=checked.profile.to_dict(),
        max_trials=checked.max_trials,
        max_minutes=checked.max_minutes,
        repeats=checked.repeats,
        repeat_best=checked.repeat_best,
        seed=checked.seed,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    if approval is not None:
        run.change_request, run.approved_by = approval.change_id, approval.approver
    try:
        with transaction.atomic():
            run.save()
    except IntegrityError:
        raise ValidationError(f"{host.name} has a tuning run under way: wait for it to end, or cancel it.") from None
    run.current_trial = TuningTrial.objects.create(
        run=run, number=0, revision=checked.base, engine=checked.base.engine, state=T.SWITCHING
    )
    audit_record(
        action="tuning.start",
        summary=checked.summary(),
        obj=run,
        host=host,
        data={**checked.params(), **approval_stamp(approval)},
        actor=actor,
    )
    _advance(run)
    if not run.is_open:  # its first step was refused (the host busy, the base gone): nothing runs
        raise ValidationError(f"The tuning run could not start: {run.reason}")
    return run


def tuning_start_from(
    *, host: Host, params: Mapping[str, Any], actor: AbstractUser | None, approval: Approval | None = None
) -> TuningRun:
    """tuning_start from a change request's params (TuningRequest.params)."""
    number = params.get("revision")
    base = DeploymentRevision.objects.filter(host=host, number=number).first() if isinstance(number, int) else None
    if base is None:
        raise ValidationError({"base": f"{host.name} has no revision r{number} to tune from."})
    names = ("objective", "level", "limits", "profile", "max_trials", "max_minutes", "repeats", "repeat_best", "seed")
    return tuning_start(
        host=host,
        base=base,
        space=params.get("space") or {},
        engines=params.get("engines") or None,
        actor=actor,
        approval=approval,
        **{k: params[k] for k in names if k in params},
    )


# --- each step ------------------------------------------------------------------------------------


def _objective(run: TuningRun) -> Objective:
    return Objective(**run.objective)


def _limits(run: TuningRun) -> tuple[Limit, ...]:
    return tuple(Limit.from_dict(d) for d in run.limits)


def _approval(run: TuningRun) -> Approval | None:
    if run.change_request is None:
        return None
    return Approval(run.change_request, run.approved_by, hosts=frozenset({run.host_id}))


def _reason(exc: Exception) -> str:
    return "; ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc) or "permission denied"


def _active(run: TuningRun) -> DeploymentRevision | None:
    return active_revision_of(Host.objects.select_related("deployment__active_revision").get(pk=run.host_id))


def _trials(run: TuningRun) -> list[TuningTrial]:
    return list(run.trials.select_related("revision").order_by("number"))


def _set(trial: TuningTrial, state: str, reason: str = "") -> None:
    trial.state, trial.reason = state, reason[:2000] or trial.reason
    if state in (T.REFUSED, T.MEASURED, T.RULED_OUT, T.FAILED):
        trial.finished_at = timezone.now()
    trial.save()


def _knob_words(knobs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs.items())


def _trial_words(run: TuningRun, engine: str, knobs: Mapping[str, Any]) -> str:
    """A candidate in words: its knobs, its engine first when it is not the base's."""
    return Candidate(engine, knobs).describe(run.base.engine)


def _measure(run: TuningRun, trial: TuningTrial) -> bool:
    """Queue the trial's next operation: its benchmark when the host serves it, else a switch to it.
    False (the trial failed, with the reason) when the panel refuses it."""
    assert trial.revision is not None
    try:
        with transaction.atomic():
            active = _active(run)
            if active is not None and active.pk == trial.revision_id:
                op = benchmark_enqueue(
                    host=run.host,
                    revision=trial.revision,
                    profile=BenchmarkProfile.from_dict(run.profile),
                    actor=run.created_by,
                    params={"tuning": run.pk, "trial": trial.number},
                )
                state = T.MEASURING
            else:
                if run.change_request is None and review_required(run.host):
                    raise ValidationError(f"{run.host.name} requires review since the run started")
                op = switch_request(revision=trial.revision, actor=run.created_by, approval=_approval(run))
                state = T.SWITCHING
    except (ValidationError, PermissionDenied) as exc:
        _set(trial, T.FAILED, _reason(exc))
        if trial.is_base:
            _fail(run, f"the base r{run.base.number} could not be measured: {_reason(exc)}")
        return False
    trial.state = state
    trial.save(update_fields=["state"])
    run.current_op, run.current_trial = op, trial
    run.save(update_fields=["current_op", "current_trial", "stage"])
    return True


def _tried(trials: list[TuningTrial]) -> list[Tried]:
    outcome: dict[str, str] = {T.MEASURED: COMPLETE, T.RULED_OUT: PRUNED, T.REFUSED: PRUNED}
    return [
        Tried(knobs=t.knobs, outcome=outcome.get(t.state, FAILED), value=t.value, engine=t.engine)
        for t in trials
        if not t.is_base
    ]


def _changes(base: DeploymentRevision, found: Candidate) -> dict[str, Any]:
    """The changes that derive `found`'s revision from `base` (planned and derived alike). Another
    engine's candidate starts from none of the base's knobs and that engine's latest install, but
    keeps what makes it the same server on the same machine, each unless the space sets it:

    - the served context: the base's context knob, read as its engine reads it, becomes the other
      engine's (else it would serve the model's native context);
    - the GPU split: the base's parallel sizes (its adapter's `parallel_sizes`: vLLM's
      tensor_parallel_size=4) become the other engine's knobs for them (`parallel_knobs`: SGLang's
      tp_size=4), unless the space sets any of that engine's `placement_knobs` (else a TP=4 base's
      SGLang candidate would start on one GPU: refused by the planner, or measuring another machine).
      llama.cpp, which splits layers and has no sizes, takes the split as equal --tensor-split shares
      on the same first GPUs (its adapter says why); from a llama.cpp base, which has no sizes either
      (it spreads its layers over the GPUs it sees), no split is carried.

    The base's variables come along with derive (CUDA_VISIBLE_DEVICES among them: the same GPUs)."""
    knobs = dict(found.knobs)
    if found.engine == base.engine:
        return {"set": knobs}
    ours, theirs = get_adapter(base.engine), get_adapter(found.engine)
    asked = base.knobs or {}
    value = asked.get(ours.context_knob) if ours.context_knob else None
    if theirs.context_knob and theirs.context_knob not in knobs and value not in (None, ""):
        try:
            tokens = ours.context_tokens(value)
        except EngineConfigError:
            tokens = None
        if tokens:
            knobs[theirs.context_knob] = tokens
    if not theirs.placement_knobs & knobs.keys():
        try:
            sizes = ours.parallel_sizes(asked)
        except EngineConfigError:
            sizes = None
        if sizes is not None:
            knobs |= theirs.parallel_knobs(sizes)
    return {"engine": found.engine, "set": knobs}


def _candidate(run: TuningRun, trials: list[TuningTrial]) -> TuningTrial | None:
    """The next candidate as a trial: refused by the planner (stored so, never started), failed
    (its revision refused), or with its revision derived from the base, ready to measure. None when
    the search or the budget is spent."""
    candidates = [t for t in trials if not t.is_base]
    measured = [t for t in candidates if t.state != T.REFUSED]
    refused = len(candidates) - len(measured)
    if len(measured) >= run.max_trials or refused >= run.max_trials * REFUSALS_PER_TRIAL:
        return None
    if timezone.now() >= run.deadline:
        return None
    base = run.base
    space = space_check(base.engine, run.space, engines=run.engines or None)
    found = next_candidate(space, _tried(trials), higher_is_better=_objective(run).higher_is_better, seed=run.seed)
    if found is None:
        return None
    knobs = dict(found.knobs)
    trial = TuningTrial.objects.create(run=run, number=len(trials), knobs=knobs, engine=found.engine, state=T.SWITCHING)
    changes = _changes(base, found)
    spec = derive(revision_spec(base), changes)
    try:
        report = plan_for_values(
            host=run.host,
            model=base.model_variant,
            engine=spec.engine,
            engine_version=spec.version,
            knobs=dict(spec.knobs),
            env=dict(spec.env),
        )
    except PlanInputError as exc:
        _set(trial, T.REFUSED, f"the planner cannot read it: {exc}")
        return trial
    trial.findings = [{"severity": f.severity.value, "code": f.code, "message": f.message} for f in report.findings]
    errors = [f for f in report.findings if f.severity.value == "error"]
    if errors:
        _set(trial, T.REFUSED, "; ".join(f"{f.code}: {f.message}" for f in errors))
        return trial
    try:
        with transaction.atomic():
            trial.revision = revision_derive(
                host=run.host,
                parent=base,
                changes=changes,
                message=f"Tuning run #{run.pk}, trial {trial.number}: {_trial_words(run, found.engine, knobs)}",
                actor=run.created_by,
            )
    except (ValidationError, EngineConfigError, PermissionDenied) as exc:
        _set(trial, T.FAILED, _reason(exc))
        return trial
    try:
        trial.planned_memory = planned_memory(trial.revision, report)
    except PlanInputError:
        trial.planned_memory = {}
    trial.save()
    return trial


def _repeat_order(run: TuningRun, trials: list[TuningTrial]) -> list[TuningTrial]:
    """The trials that get more rounds: the best few that met the limits, then the base (last, so
    the run ends on the base and its switch back costs nothing); [] when none met them."""
    scored = [Scored(t, t.value, bool(t.passed)) for t in trials if not t.is_base and t.state == T.MEASURED]
    best = [s.key for s in ranked(scored, _objective(run))[: run.repeat_best]]
    return [*best, trials[0]] if best else []


def _next_trial(run: TuningRun) -> TuningTrial | None:
    """The trial to measure next (a new candidate when the search goes on), or None: go back."""
    for _ in range(MAX_STEPS):
        trials = _trials(run)
        base = trials[0]
        if not base.rounds:
            run.stage = TuningRun.Stage.BASE
            return base if base.state != T.FAILED else None
        if run.stage in (TuningRun.Stage.BASE, TuningRun.Stage.TRIALS):
            run.stage = TuningRun.Stage.TRIALS
            trial = _candidate(run, trials)
            if trial is None:
                run.stage = TuningRun.Stage.REPEATS
                continue
            if trial.state == T.SWITCHING:
                return trial
            continue  # refused or failed: the next candidate
        if run.stage == TuningRun.Stage.REPEATS:
            return next((t for t in _repeat_order(run, trials) if len(t.rounds) < run.repeats), None)
        return None
    return None


def _advance(run: TuningRun) -> None:
    """Queue the run's next operation, or end it (the caller holds the run's row)."""
    for _ in range(MAX_STEPS):
        if not run.is_open:
            return
        if run.current_op_id and Operation.objects.filter(pk=run.current_op_id, state__in=ACTIVE_STATES).exists():
            return
        if run.cancel_requested or run.state == TuningRun.State.RESTORING or run.stage == TuningRun.Stage.RESTORE:
            _restore(run)
            return
        trial = _next_trial(run)
        if trial is None:
            run.stage = TuningRun.Stage.RESTORE
            continue
        if _measure(run, trial):
            return


def _fail(run: TuningRun, reason: str) -> None:
    """Something went wrong: the run goes back to the base and ends failed, with the reason."""
    run.state, run.stage, run.reason = TuningRun.State.RESTORING, TuningRun.Stage.RESTORE, reason[:2000]
    run.save(update_fields=["state", "stage", "reason"])


def _restore(run: TuningRun) -> None:
    """Go back to the base: a switch to it, unless the host serves it and nothing went wrong (after
    a failure the host's engine may serve another revision than the panel recorded: an operation
    lost to a restarted agent ended without saying, so the switch back is made whatever it says)."""
    run.stage = TuningRun.Stage.RESTORE
    active = _active(run)
    if active is not None and active.pk == run.base_id and run.state != TuningRun.State.RESTORING:
        _end(run)
        return
    try:
        with transaction.atomic():
            op = switch_request(revision=run.base, actor=run.created_by, approval=_approval(run))
    except (ValidationError, PermissionDenied) as exc:
        run.reason = f"{run.reason + '; ' if run.reason else ''}could not go back to r{run.base.number}: {_reason(exc)}"
        _end(run, TuningRun.State.FAILED)
        return
    run.current_op, run.current_trial = op, None
    run.save(update_fields=["current_op", "current_trial", "stage"])


def _measured_memory(revision: DeploymentRevision | None) -> dict[str, int]:
    if revision is None:
        return {}
    return {m.device: m.peak_bytes for m in MeasuredMemory.objects.filter(revision=revision)}


def _judge(run: TuningRun, trials: list[TuningTrial]) -> None:
    """The best trial and its verdict against the base (serving.tuning.verdict)."""
    objective = _objective(run)
    scored = [Scored(t, t.value, bool(t.passed)) for t in trials if not t.is_base and t.state == T.MEASURED]
    order = ranked(scored, objective)
    if not order:
        run.best, run.verdict = None, {}
        return
    best: TuningTrial = order[0].key
    values = [[r["value"] for r in t.rounds if isinstance(r.get("value"), int | float)] for t in (trials[0], best)]
    judged = verdict(objective, values[0], values[1])
    run.best, run.verdict = best, {**judged.to_dict(), "best": best.number, "base": 0}


def _end(run: TuningRun, state: str | None = None) -> None:
    """End the run: cancelled when asked, failed when it went back for a failure, finished else."""
    if state is None:
        if run.cancel_requested:
            state = TuningRun.State.CANCELLED
        elif run.state == TuningRun.State.RESTORING:
            state = TuningRun.State.FAILED
        else:
            state = TuningRun.State.SUCCEEDED
    trials = _trials(run)
    for trial in trials:
        if trial.state in (T.SWITCHING, T.MEASURING):
            _set(trial, T.FAILED, "the run ended before it was measured")
        measured = _measured_memory(trial.revision) if trial.rounds else {}
        if measured and measured != trial.measured_memory:
            trial.measured_memory = measured
            trial.save(update_fields=["measured_memory"])
    _judge(run, trials)
    if state == TuningRun.State.SUCCEEDED and not run.reason:
        run.reason = run.verdict.get("summary") or "no candidate met the limits"
        if run.best is not None:
            run.reason = f"trial {run.best.number} ({_trial_words(run, run.best.engine, run.best.knobs)}): {run.reason}"
    run.state, run.stage, run.finished_at = state, TuningRun.Stage.DONE, timezone.now()
    run.current_op = run.current_trial = None
    run.save()
    audit_record(
        action=f"tuning.{state}",
        summary=f"tuning run #{run.pk} on {run.host.name} {state}: {run.reason[:200]}",
        obj=run,
        host=run.host,
        data={"best": run.best.number if run.best else None, "verdict": run.verdict},
        actor=None,
    )


def _record_round(run: TuningRun, trial: TuningTrial, bench: BenchmarkRun) -> None:
    figures = run_figures(bench.results or {}, bench.raw or [])
    value = objective_value(figures, _objective(run))
    trial.rounds = [*trial.rounds, {"run": bench.pk, "figures": figures, "value": value}]
    values = [r["value"] for r in trial.rounds if isinstance(r.get("value"), int | float)]
    trial.value = sum(values) / len(values) if values else None
    trial.measured_memory = _measured_memory(trial.revision) or trial.measured_memory
    if trial.is_base:
        _set(trial, T.MEASURED)
        return
    base = run.trials.get(number=0)
    breaks = limit_breaks(trial.figures(), _limits(run), base.figures())
    trial.passed = not breaks and trial.value is not None and math.isfinite(trial.value)
    if breaks and len(trial.rounds) == 1:
        _set(trial, T.RULED_OUT, "stopped after its first round: " + "; ".join(breaks))
    else:
        _set(trial, T.MEASURED, "; ".join(breaks))


def _step_after(run: TuningRun, op: Operation) -> None:
    """`op`, the operation the run waited for, ended: record what it measured, take the next step."""
    run.current_op = None
    ok = op.state == OperationState.SUCCEEDED
    why = error_line(op.error) or op.state
    trial = TuningTrial.objects.select_related("revision").filter(pk=run.current_trial_id).first()
    if run.stage == TuningRun.Stage.RESTORE or trial is None:
        if ok:
            _end(run)
        else:
            run.reason = f"{run.reason + '; ' if run.reason else ''}the switch back to r{run.base.number} {why}"
            _end(run, TuningRun.State.FAILED)
        return
    if op.state == OperationState.LOST:
        _set(trial, T.FAILED, f"its {op.kind} was lost: {why}")
        _fail(run, f"trial {trial.number}'s {op.kind} was lost ({why}): the run goes back to the base")
    elif op.kind in (OperationKind.SWITCH, OperationKind.ROLLBACK):
        if ok and run.cancel_requested:
            _set(trial, T.FAILED if not trial.rounds else trial.state, "the run was cancelled before it was measured")
        elif ok:
            if _measure(run, trial):
                return
        elif op.state == OperationState.CANCELLED:
            _set(trial, T.FAILED, "its switch was cancelled")
        else:
            _set(trial, T.FAILED, f"its switch {why}")
            if trial.is_base and not run.cancel_requested:
                _fail(run, f"the switch to the base r{run.base.number} {why}")
    elif op.kind == OperationKind.BENCHMARK:
        bench = BenchmarkRun.objects.filter(operation=op).first()
        if ok and bench is not None and bench.status == "completed":
            _record_round(run, trial, bench)
        elif trial.rounds:  # a repeat that did not finish: kept as a round that measured nothing
            failed = {"run": bench.pk if bench else None, "figures": {}, "value": None, "failed": why}
            trial.rounds, trial.state = [*trial.rounds, failed], T.MEASURED
            trial.save(update_fields=["rounds", "state"])
        else:
            _set(trial, T.FAILED, f"its benchmark {why}")
            if trial.is_base and not run.cancel_requested:
                _fail(run, f"the base r{run.base.number} could not be measured: its benchmark {why}")
    run.save()
    _advance(run)


def tuning_operation_ended(*, op: Operation) -> None:
    """An operation ended (operation_ended): the run waiting for it, if any, takes its next step."""
    with transaction.atomic():
        run = TuningRun.objects.select_for_update().filter(current_op_id=op.pk, state__in=TuningRun.OPEN).first()
        if run is None:
            return
        ended = Operation.objects.get(pk=op.pk)
        if ended.state in ACTIVE_STATES:
            return
        _step_after(run, ended)


def tuning_sweep() -> int:
    """Beat's sweep: every open run whose operation ended without its step (a panel restarted in
    between) or that waits for none takes it now. Answers how many moved."""
    moved = 0
    for pk in TuningRun.objects.filter(state__in=TuningRun.OPEN).values_list("pk", flat=True):
        with transaction.atomic():
            run = TuningRun.objects.select_for_update().filter(pk=pk, state__in=TuningRun.OPEN).first()
            if run is None:
                continue
            op = Operation.objects.filter(pk=run.current_op_id).first() if run.current_op_id else None
            if op is not None and op.state in ACTIVE_STATES:
                continue
            try:
                _step_after(run, op) if op is not None else _advance(run)
            except Exception:  # noqa: BLE001 - one run's trouble must not stop the others' sweep
                log.exception("tuning run %s: the sweep's step failed", pk)
                continue
            moved += 1
    return moved


# --- cancelling and proposing ---------------------------------------------------------------------


@transaction.atomic
def tuning_cancel(*, run: TuningRun, actor: AbstractUser | None) -> TuningRun:
    """Stop the run: a benchmark under way is cancelled, a switch under way finishes, and the host
    goes back to the base revision; the run ends cancelled once it is there."""
    ensure_role(actor, OPERATOR)
    run = TuningRun.objects.select_for_update().get(pk=run.pk)
    if not run.is_open:
        raise ValidationError(f"Tuning run #{run.pk} already ended ({run.get_state_display().lower()}).")
    if run.cancel_requested:
        return run
    run.cancel_requested = True
    run.save(update_fields=["cancel_requested"])
    audit_record(action="tuning.cancel", summary=f"cancel tuning run #{run.pk}", obj=run, host=run.host, actor=actor)
    op = run.current_op
    if op is not None and op.state in ACTIVE_STATES and op.kind == OperationKind.BENCHMARK:
        operation_cancel(op=op, actor=actor)
        op = Operation.objects.get(pk=op.pk)
        if op.state not in ACTIVE_STATES:  # it had not begun: cancelled now, its trial says so
            _step_after(run, op)
            return run
    _advance(run)
    return run


@dataclass(frozen=True)
class Proposal:
    """What proposing a trial did: a switch queued (`operation`), a rollout started over a group
    (`rollout`), or a change request opened."""

    revision: DeploymentRevision
    operation: Operation | None = None
    change_request: int | None = None
    rollout: Rollout | None = None


def tuning_propose(
    *,
    run: TuningRun,
    actor: AbstractUser | None,
    trial: TuningTrial | None = None,
    anyway: bool = False,
    review: bool = False,
    group: str = "",
    batch_size: Any = 1,
) -> Proposal:
    """Propose the run's best trial (or `trial`) as what the host serves: a switch to its revision,
    through switch_request, so on a host that requires review (or with `review`) a change request
    opens instead. With `group` (a host tag), a rollout of the trial's knobs over those hosts
    instead (rollout_start: each host's active revision gets them, a canary first, `batch_size`
    hosts a wave; a change request where one of them requires review). Refused when the run has
    not finished, or its best did not beat the base beyond noise (unless `anyway`)."""
    ensure_role(actor, OPERATOR)
    if run.state != TuningRun.State.SUCCEEDED:
        raise ValidationError(f"Tuning run #{run.pk} is {run.get_state_display().lower()}: propose a finished one.")
    chosen = trial or run.best
    if chosen is None or chosen.run_id != run.pk or chosen.revision is None or chosen.state != T.MEASURED:
        raise ValidationError(f"Tuning run #{run.pk} has no measured trial to propose: {run.reason}")
    if chosen.pk == getattr(run.best, "pk", None) and not run.verdict.get("beats_base") and not anyway:
        raise ValidationError(
            f"Trial {chosen.number} did not beat the base beyond noise ({run.verdict.get('summary', '')}); "
            "propose it anyway to switch to it still."
        )
    try:
        with review_asked() if review else nullcontext():
            if group:
                rollout = _roll_out(run, chosen, group=group, batch_size=batch_size, actor=actor)
                proposal = Proposal(revision=chosen.revision, rollout=rollout)
            else:
                proposal = Proposal(
                    revision=chosen.revision, operation=switch_request(revision=chosen.revision, actor=actor)
                )
    except ChangeRequested as opened:
        proposal = Proposal(revision=chosen.revision, change_request=int(opened.change.pk))
    audit_record(
        action="tuning.propose",
        summary=f"tuning run #{run.pk}: trial {chosen.number} (r{chosen.revision.number}) proposed",
        obj=run,
        host=run.host,
        data={
            "trial": chosen.number,
            "revision": chosen.revision.number,
            "change_request": proposal.change_request,
            "rollout": proposal.rollout.pk if proposal.rollout else None,
        },
        actor=actor,
    )
    return proposal


def _roll_out(
    run: TuningRun, trial: TuningTrial, *, group: str, batch_size: Any, actor: AbstractUser | None
) -> Rollout:
    """A rollout of `trial`'s knobs over the hosts tagged `group`, its message naming the run."""
    if trial.engine and trial.engine != run.base.engine:
        raise ValidationError(
            {
                "group": f"Trial {trial.number} runs {engine_label(trial.engine)}, not the base's engine: a rollout "
                "sets knobs on each host's own revision, so propose it as a switch of this host instead."
            }
        )
    if not trial.knobs:
        raise ValidationError({"group": f"Trial {trial.number} changes no knob: there is nothing to roll out."})
    message = f"tuning run #{run.pk} on {run.host.name}: trial {trial.number} ({_knob_words(trial.knobs)})"
    return rollout_start(
        group=group,
        kind=Rollout.Kind.REVISION,
        change={"set": dict(trial.knobs), "message": message},
        batch_size=batch_size,
        actor=actor,
    )

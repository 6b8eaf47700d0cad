"""Tuning runs: start one on a host (a change request first where the host requires review: 202),
follow it and its trials, cancel it (the host goes back to the base revision), propose its best."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import Http404, HttpRequest
from ninja import Field, Router, Schema, Status

from api.schemas import Error
from controlpanel.roles import OPERATOR, VIEWER
from tuning import selectors
from tuning.models import TuningRun
from tuning.services import tuning_cancel, tuning_propose, tuning_start

from . import acted, actor, host_filter, host_for, listed, revision_or_404

router = Router(tags=["tuning"])
hosts = Router(tags=["hosts"])


class TuningIn(Schema):
    space: dict[str, list[Any]] = Field(
        description="Knobs of the base's engine and the values to try for each ({} with other engines only)."
    )
    engines: dict[str, dict[str, list[Any]]] = Field(
        default_factory=dict,
        description="Other engines to try, each with its knobs and values ({} = at its defaults), e.g. "
        '{"sglang": {"max_running_requests": [4, 8]}}: only an engine that loads the base\'s model format and '
        "that the host has installed.",
    )
    base: int | None = Field(None, description="The revision to tune from (default: the one the host serves).")
    objective: str = Field("throughput", description="decode, throughput, ttft_p95 or j_per_token.")
    level: str = Field("", description="The load level judged, e.g. 'concurrency 8' (default: the profile's last).")
    limits: str = Field("", description='Hard limits, e.g. "ttft_p95<=500,j_per_token<=base".')
    profile: str | dict[str, Any] = Field("quick", description="A named benchmark profile, or one in full.")
    max_trials: int = Field(8, description="Candidates measured at most (the base aside).")
    max_minutes: int = Field(60, description="No candidate starts after this many minutes.")
    repeats: int = Field(3, description="Rounds the best few and the base get in all.")
    repeat_best: int = Field(2, description="How many of the best are measured again.")
    seed: int = Field(0, description="The sampler's seed (a space above 32 candidates).")


class TrialOut(Schema):
    number: int
    engine: str = Field(description="The engine it ran: the base's, or another the space names.")
    knobs: dict[str, Any]
    revision: int | None
    state: str
    reason: str
    value: float | None
    passed: bool | None
    rounds: list[dict[str, Any]]
    planned_memory: dict[str, int]
    measured_memory: dict[str, int]
    findings: list[dict[str, Any]]
    pareto: dict[str, bool] = Field(description="Per cost (ttft_p95, memory, j_per_token): on the Pareto front.")


class TuningOut(Schema):
    id: int
    host: str
    base: int
    space: dict[str, list[Any]]
    engines: dict[str, dict[str, list[Any]]] = Field(description="Other engines tried, with their knobs.")
    objective: dict[str, str]
    limits: list[dict[str, Any]]
    profile: dict[str, Any]
    max_trials: int
    max_minutes: int
    repeats: int
    repeat_best: int
    state: str
    stage: str
    reason: str
    best: int | None = Field(None, description="The best trial's number")
    verdict: dict[str, Any] = Field(description="The best against the base: beats_base, within_noise, change_pct...")
    change_request: int | None
    created_by: str | None
    created_at: datetime
    finished_at: datetime | None
    trials: list[TrialOut]


class TuningList(Schema):
    items: list[dict[str, Any]]
    count: int


class ProposeIn(Schema):
    trial: int | None = Field(None, description="Another trial than the best.")
    anyway: bool = Field(False, description="Even when it did not beat the base beyond noise.")
    review: bool = Field(False, description="Open a change request even where none is required.")
    group: str = Field("", description="A host tag: roll the trial's knobs out over those hosts instead of a switch.")
    batch_size: int = Field(1, description="With group: hosts a wave after the canary.")


class ProposeOut(Schema):
    revision: int
    operation: str | None
    change_request: int | None
    rollout: int | None = Field(None, description="The rollout started (with group).")


def _dict(run: TuningRun) -> dict[str, Any]:
    trials = selectors.tuning_trials(run=run)
    fronts = {p.trial.pk: p.front for p in selectors.tuning_points(run=run, trials=trials)}
    return {
        "id": run.pk,
        "host": run.host.name,
        "base": run.base.number,
        "space": run.space,
        "engines": run.engines if isinstance(run.engines, dict) else {},
        "objective": run.objective,
        "limits": run.limits,
        "profile": run.profile,
        "max_trials": run.max_trials,
        "max_minutes": run.max_minutes,
        "repeats": run.repeats,
        "repeat_best": run.repeat_best,
        "state": run.state,
        "stage": run.stage,
        "reason": run.reason,
        "best": run.best.number if run.best else None,
        "verdict": run.verdict if isinstance(run.verdict, dict) else {},
        "change_request": run.change_request,
        "created_by": run.created_by.username if run.created_by else None,
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "trials": [
            {
                "number": t.number,
                "engine": t.engine or run.base.engine,
                "knobs": t.knobs,
                "revision": t.revision.number if t.revision else None,
                "state": t.state,
                "reason": t.reason,
                "value": t.value,
                "passed": t.passed,
                "rounds": t.rounds,
                "planned_memory": t.planned_memory,
                "measured_memory": t.measured_memory,
                "findings": t.findings,
                "pareto": fronts.get(t.pk, {}),
            }
            for t in trials
        ],
    }


def _run(run_id: int) -> TuningRun:
    return selectors.tuning_run_get(pk=run_id)


@hosts.post(
    "{name}/tuning/",
    response={201: TuningOut, 202: Error, 400: Error, 403: Error, 404: Error},
    summary="Start a tuning run on a host (a host that requires review: 202 with the change request)",
)
def tuning_new(request: HttpRequest, name: str, payload: TuningIn) -> Status:
    user, host = host_for(request, name, OPERATOR)
    p = payload
    base = revision_or_404(host, p.base) if p.base is not None else None
    run = tuning_start(
        host=host,
        base=base,
        space=p.space,
        engines=p.engines or None,
        objective=p.objective,
        level=p.level,
        limits=p.limits,
        profile=p.profile,
        max_trials=p.max_trials,
        max_minutes=p.max_minutes,
        repeats=p.repeats,
        repeat_best=p.repeat_best,
        seed=p.seed,
        actor=user,
    )
    return Status(201, _dict(_run(run.pk)))


@router.get("", response=TuningList, summary="Tuning runs, newest first")
def tuning_list(request: HttpRequest, host: str | None = None) -> dict[str, Any]:
    actor(request, VIEWER)
    return listed(
        {
            "id": r.pk,
            "host": r.host.name,
            "base": r.base.number,
            "state": r.state,
            "best": r.best.number if r.best else None,
        }
        for r in selectors.tuning_run_list(host=host_filter(host))
    )


@router.get("{run_id}/", response={200: TuningOut, 404: Error}, summary="A tuning run and its trials")
def tuning_get(request: HttpRequest, run_id: int) -> dict[str, Any]:
    actor(request, VIEWER)
    return _dict(_run(run_id))


@router.post(
    "{run_id}/cancel/",
    response={200: TuningOut, 400: Error, 403: Error, 404: Error},
    summary="Cancel: the host goes back to the base revision",
)
def tuning_cancel_request(request: HttpRequest, run_id: int) -> dict[str, Any]:
    return _dict(acted(request, tuning_cancel, lambda: _run(run_id), "run"))


@router.post(
    "{run_id}/propose/",
    response={200: ProposeOut, 202: Error, 400: Error, 403: Error, 404: Error},
    summary="Propose the best trial: a switch to it (with group: a rollout of its knobs), or a change request",
)
def tuning_propose_request(request: HttpRequest, run_id: int, payload: ProposeIn) -> dict[str, Any]:
    user = actor(request, OPERATOR)
    run = _run(run_id)
    trial = None
    if payload.trial is not None:
        trial = run.trials.filter(number=payload.trial).first()
        if trial is None:
            raise Http404(f"Tuning run #{run.pk} has no trial {payload.trial}.")
    proposal = tuning_propose(
        run=run,
        trial=trial,
        anyway=payload.anyway,
        review=payload.review,
        group=payload.group,
        batch_size=payload.batch_size,
        actor=user,
    )
    return {
        "revision": proposal.revision.number,
        "operation": str(proposal.operation.pk) if proposal.operation else None,
        "change_request": proposal.change_request,
        "rollout": proposal.rollout.pk if proposal.rollout else None,
    }

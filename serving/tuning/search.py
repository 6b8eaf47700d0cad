"""The next candidate a tuning run measures.

A small space (at most EXHAUSTIVE_MAX candidates) is searched exhaustively, in the space's order.
A larger one by Optuna's TPE sampler (optuna.samplers.TPESampler), asked for one candidate at a
time (a proposal already measured becomes the nearest untried candidate). The study is rebuilt in
memory from the trials measured so far (each told as complete with its objective value, pruned
when it broke a limit or the planner refused it, failed when it did not start), so nothing but the
run's rows holds the search's state and a panel restarted mid-run asks the same question again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serving.tuning.space import EXHAUSTIVE_MAX, SearchSpace

COMPLETE, PRUNED, FAILED = "complete", "pruned", "failed"


@dataclass(frozen=True)
class Tried:
    """A candidate already taken: its knobs, how it ended (COMPLETE, PRUNED: broke a limit or the
    planner refused it, FAILED: did not start) and its objective value when complete."""

    knobs: Mapping[str, Any]
    outcome: str = COMPLETE
    value: float | None = None


def _key(knobs: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in knobs.items()))


def next_candidate(
    space: SearchSpace,
    tried: Sequence[Tried],
    *,
    higher_is_better: bool = True,
    seed: int = 0,
    exhaustive_max: int = EXHAUSTIVE_MAX,
) -> dict[str, Any] | None:
    """The next candidate to measure, or None when every one was tried."""
    seen = {_key(t.knobs) for t in tried}
    if len(seen) >= space.size():
        return None
    if space.size() <= exhaustive_max:
        return next((c for c in space.candidates() if _key(c) not in seen), None)
    return _sampled(space, tried, seen, higher_is_better=higher_is_better, seed=seed)


def _sampled(
    space: SearchSpace, tried: Sequence[Tried], seen: set[Any], *, higher_is_better: bool, seed: int
) -> dict[str, Any] | None:
    import optuna  # a heavy import: only a large space needs it

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions: dict[str, optuna.distributions.BaseDistribution] = {
        name: optuna.distributions.CategoricalDistribution(values) for name, values in space.knobs
    }
    study = optuna.create_study(
        direction="maximize" if higher_is_better else "minimize",
        sampler=optuna.samplers.TPESampler(seed=seed),
    )
    for t in tried:
        if not space.contains(t.knobs):
            continue
        params = {name: t.knobs[name] for name in space.names}
        if t.outcome == COMPLETE and t.value is not None:
            state, value = optuna.trial.TrialState.COMPLETE, t.value
        else:
            state, value = (
                (optuna.trial.TrialState.PRUNED if t.outcome == PRUNED else optuna.trial.TrialState.FAIL),
                None,
            )
        study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=value, state=state))
    trial = study.ask(distributions)
    proposed = {name: trial.params[name] for name in space.names}
    # TPE proposes a candidate already measured when it is sure of the region: the nearest untried
    # one (fewest knobs different, then the space's order) is measured instead, in that region.
    return min(
        (c for c in space.candidates() if _key(c) not in seen),
        key=lambda c: sum(c[n] != proposed[n] for n in space.names),
        default=None,
    )

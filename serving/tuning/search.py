"""The next candidate a tuning run measures.

A small space (at most EXHAUSTIVE_MAX candidates) is searched exhaustively, in the space's order.
A larger one by Optuna's TPE sampler (optuna.samplers.TPESampler), asked for one candidate at a
time (a proposal already measured is told again and the sampler asked anew; after ASKS of them the
nearest untried candidate is taken); a space over several
engines gives it the engine as one more categorical dimension, each engine's knobs asked only for
that engine. The study is rebuilt in
memory from the trials measured so far (each told as complete with its objective value, pruned
when it broke a limit or the planner refused it, failed when it did not start), so nothing but the
run's rows holds the search's state and a panel restarted mid-run asks the same question again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serving.tuning.space import EXHAUSTIVE_MAX, Candidate, SearchSpace

COMPLETE, PRUNED, FAILED = "complete", "pruned", "failed"


@dataclass(frozen=True)
class Tried:
    """A candidate already taken: its knobs, how it ended (COMPLETE, PRUNED: broke a limit or the
    planner refused it, FAILED: did not start), its objective value when complete, and the engine
    it ran ("" = the space's own, the base's)."""

    knobs: Mapping[str, Any]
    outcome: str = COMPLETE
    value: float | None = None
    engine: str = ""


ENGINE = "@engine"  # the engine's dimension among the sampler's parameters (no knob is named so)
ASKS = 32  # questions to the sampler for an untried candidate before the nearest untried is taken


def _key(engine: str, knobs: Mapping[str, Any]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return engine, tuple(sorted((k, repr(v)) for k, v in knobs.items()))


def _param(space: SearchSpace, engine: str, knob: str) -> str:
    """A knob's parameter for the sampler: its name for the base engine's (as before there were
    other engines), "<engine>/<knob>" for another's."""
    return knob if engine == space.engine else f"{engine}/{knob}"


def next_candidate(
    space: SearchSpace,
    tried: Sequence[Tried],
    *,
    higher_is_better: bool = True,
    seed: int = 0,
    exhaustive_max: int = EXHAUSTIVE_MAX,
) -> Candidate | None:
    """The next candidate to measure, or None when every one was tried."""
    seen = {_key(t.engine or space.engine, t.knobs) for t in tried}
    if len(seen) >= space.size():
        return None
    untried = (c for c in space.candidates() if _key(c.engine, c.knobs) not in seen)
    if space.size() <= exhaustive_max:
        return next(untried, None)
    return _sampled(space, tried, untried, higher_is_better=higher_is_better, seed=seed)


def _sampled(
    space: SearchSpace, tried: Sequence[Tried], untried: Iterator[Candidate], *, higher_is_better: bool, seed: int
) -> Candidate | None:
    """TPE over the engine (a categorical dimension, when the space has other engines) and the
    chosen engine's knobs (each a categorical one, asked only for that engine: a conditional space)."""
    import optuna  # a heavy import: only a large space needs it

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    engines = space.engines
    Categorical = optuna.distributions.CategoricalDistribution

    def distributions(engine: str) -> dict[str, optuna.distributions.BaseDistribution]:
        arm = space.arm(engine)
        assert arm is not None
        chosen: dict[str, optuna.distributions.BaseDistribution] = (
            {ENGINE: Categorical(engines)} if space.others else {}
        )
        return chosen | {_param(space, engine, name): Categorical(values) for name, values in arm.knobs}

    study = optuna.create_study(
        direction="maximize" if higher_is_better else "minimize",
        sampler=optuna.samplers.TPESampler(seed=seed),
    )

    def ended(t: Tried) -> tuple[optuna.trial.TrialState, float | None]:
        if t.outcome == COMPLETE and t.value is not None:
            return optuna.trial.TrialState.COMPLETE, t.value
        return (optuna.trial.TrialState.PRUNED if t.outcome == PRUNED else optuna.trial.TrialState.FAIL), None

    known: dict[Any, Tried] = {}
    for t in tried:
        engine = t.engine or space.engine
        if not space.contains(Candidate(engine, t.knobs)):
            continue
        known[_key(engine, t.knobs)] = t
        params: dict[str, Any] = {ENGINE: engine} if space.others else {}
        params |= {_param(space, engine, name): v for name, v in t.knobs.items()}
        state, value = ended(t)
        study.add_trial(
            optuna.trial.create_trial(params=params, distributions=distributions(engine), value=value, state=state)
        )
    proposed: Candidate | None = None
    for _ in range(ASKS):
        trial = study.ask()
        engine = str(trial.suggest_categorical(ENGINE, engines)) if space.others else space.engine
        arm = space.arm(engine)
        assert arm is not None
        proposed = Candidate(
            engine, {name: trial.suggest_categorical(_param(space, engine, name), v) for name, v in arm.knobs}
        )
        again = known.get(_key(engine, proposed.knobs))
        if again is None:
            return proposed
        # Measured already: told again as it ended, the sampler's next question draws elsewhere (its
        # random start-up, seeded alike on every rebuild, would otherwise propose the same point).
        state, value = ended(again)
        study.tell(trial, value, state=state)
    # Still one measured: the nearest untried (the same engine first, then fewest knobs different,
    # then the space's order).
    assert proposed is not None
    chosen = proposed
    return min(untried, key=lambda c: _distance(c, chosen), default=None)


def _distance(candidate: Candidate, proposed: Candidate) -> tuple[int, int]:
    if candidate.engine != proposed.engine:
        return 1, 0
    return 0, sum(candidate.knobs.get(n) != v for n, v in proposed.knobs.items())

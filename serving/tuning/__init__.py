"""Tuning: finding a host's best settings by measuring (pure: no Django, no I/O).

- `space.py`: the search space (knobs and their values; other engines' knobs too, where the base's
  model allows), checked against each engine adapter's knob specs (serving.engines), and its
  candidates (an engine and its knobs) in a fixed order.
- `objective.py`: what a trial is judged by: an objective (a benchmark figure to maximise or
  minimise at one load level), hard limits (absolute, or relative to the base revision's run),
  the early stop of a trial that breaks a limit, the winner against the base within the runs'
  own noise (serving.benchmarking.stats.within_noise, the rule the benchmark comparison uses),
  and the Pareto front of the measured trials.
- `search.py`: the next candidate to measure: every one in order for a small space, Optuna's
  TPE sampler for a large one (ask and tell, rebuilt from the trials measured so far).

The panel's side (tuning/: rows, the run's steps as operations, propose) reads these and
nothing else decides what a tuning run measures or which trial won.
"""

from __future__ import annotations

from serving.tuning.objective import (
    Limit,
    Objective,
    Verdict,
    limit_breaks,
    limits_from_input,
    objective_value,
    pareto_front,
    ranked,
    verdict,
)
from serving.tuning.search import Tried, next_candidate
from serving.tuning.space import (
    EXHAUSTIVE_MAX,
    Candidate,
    SearchSpace,
    TuningInputError,
    engine_refusal,
    space_check,
)

__all__ = [
    "EXHAUSTIVE_MAX",
    "Candidate",
    "Limit",
    "Objective",
    "SearchSpace",
    "Tried",
    "TuningInputError",
    "Verdict",
    "engine_refusal",
    "limit_breaks",
    "limits_from_input",
    "next_candidate",
    "objective_value",
    "pareto_front",
    "ranked",
    "space_check",
    "verdict",
]

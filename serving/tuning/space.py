"""A tuning run's search space: knobs of one engine, each with the values to try.

Each value is checked by the engine adapter's own knob spec (serving.engines.knobs.check_knobs:
the same check a revision's knobs pass), and kept as the adapter normalises it. A knob whose value
reaches beyond serving (a path the engine opens, code it runs: a spec with `concerns`) is no
tuning knob: the space refuses it. Candidates come in a fixed order (the product of the values,
the first knob slowest), so an exhaustive search and its tests are repeatable.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serving.engines.base import EngineConfigError
from serving.engines.knobs import CheckedAdapter, KnobSpec, check_knobs
from serving.engines.registry import get_adapter
from serving.errors import FieldError

# A space of at most this many candidates is searched exhaustively; a larger one by a sampler.
EXHAUSTIVE_MAX = 32
MAX_KNOBS = 8
MAX_VALUES = 16


class TuningInputError(FieldError):
    """A space, objective or limit the run cannot use; `field` names the input it belongs to."""

    field_default = "space"
    field: str


@dataclass(frozen=True)
class SearchSpace:
    """Knobs of `engine` and the values to try for each, in order."""

    engine: str
    knobs: tuple[tuple[str, tuple[Any, ...]], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.knobs)

    def size(self) -> int:
        return math.prod(len(values) for _, values in self.knobs)

    def candidates(self) -> Iterator[dict[str, Any]]:
        """Every combination, the first knob slowest."""
        names = self.names
        for combo in itertools.product(*(values for _, values in self.knobs)):
            yield dict(zip(names, combo, strict=True))

    def contains(self, knobs: Mapping[str, Any]) -> bool:
        return set(knobs) == set(self.names) and all(knobs[n] in values for n, values in self.knobs)

    def to_dict(self) -> dict[str, list[Any]]:
        return {name: list(values) for name, values in self.knobs}


def tunable(spec: KnobSpec) -> bool:
    return spec.concerns is None and spec.kind not in ("json", "path")


def space_check(engine: str, space: Mapping[str, Sequence[Any]]) -> SearchSpace:
    """`space` ({knob: [values]}) checked against `engine`'s knob specs; TuningInputError naming
    the knob otherwise (unknown, not tunable, a value the engine refuses, a value twice)."""
    try:
        adapter = get_adapter(engine)
    except EngineConfigError as exc:
        raise TuningInputError(str(exc), field="engine") from None
    if not isinstance(adapter, CheckedAdapter):
        raise TuningInputError(f"{engine}'s knobs are not checked by a knob table", field="engine")
    specs: Mapping[str, Any] = adapter.knobs
    if not isinstance(space, Mapping) or not space:
        raise TuningInputError("a search space needs at least one knob with values to try, e.g. parallel=1,2,4")
    if len(space) > MAX_KNOBS:
        raise TuningInputError(f"a search space takes at most {MAX_KNOBS} knobs, not {len(space)}")
    knobs: list[tuple[str, tuple[Any, ...]]] = []
    for name, values in space.items():
        spec = specs.get(name) if isinstance(name, str) else None
        if spec is None:
            raise TuningInputError(f"{engine} has no knob {name!r}", field=str(name))
        if not tunable(spec):
            raise TuningInputError(
                f"{name} names a file or code the engine reads: it is set on the base revision, not tuned",
                field=name,
            )
        if isinstance(values, str | bytes) or not isinstance(values, Sequence) or not values:
            raise TuningInputError(f"{name} needs a list of values to try", field=name)
        if len(values) > MAX_VALUES:
            raise TuningInputError(f"{name} has {len(values)} values; at most {MAX_VALUES} are tried", field=name)
        checked: list[Any] = []
        for value in values:
            try:
                normal = check_knobs(adapter, {name: value}).get(name)
            except EngineConfigError as exc:
                raise TuningInputError(str(exc), field=name) from None
            if normal is None or normal in checked:
                raise TuningInputError(f"{name} lists {value!r} twice", field=name)
            checked.append(normal)
        knobs.append((name, tuple(checked)))
    result = SearchSpace(engine=engine, knobs=tuple(knobs))
    if result.size() < 2:
        raise TuningInputError("a search space needs at least two candidates: give a knob two values or more")
    return result

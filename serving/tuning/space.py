"""A tuning run's search space: knobs of the base's engine, each with the values to try, and
knobs of other engines where the base's model allows (the adapter loads its format, the host has
the engine installed): the engine is one more dimension of the search.

Each value is checked by the engine adapter's own knob spec (serving.engines.knobs.check_knobs:
the same check a revision's knobs pass), and kept as the adapter normalises it. A knob whose value
reaches beyond serving (a path the engine opens, code it runs: a spec with `concerns`) is no
tuning knob: the space refuses it. Candidates come in a fixed order (each engine's product of the
values, the first knob slowest; the engines in turn, the base's first), so an exhaustive search and
its tests are repeatable.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serving.engines.base import EngineConfigError
from serving.engines.knobs import CheckedAdapter, KnobSpec, check_knobs
from serving.engines.registry import engine_label, format_refusal, get_adapter
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
class Candidate:
    """One candidate of a space: the engine it runs (the base's or another) and the knobs it sets."""

    engine: str
    knobs: Mapping[str, Any]

    def describe(self, base_engine: str) -> str:
        """In words: its knobs ("parallel=2"), its engine first when not the base's ("SGLang
        max_running_requests=8", "vLLM at its defaults"); "" = the base engine's, no knob."""
        words = ", ".join(f"{k}={v}" for k, v in self.knobs.items())
        if not self.engine or self.engine == base_engine:
            return words
        return f"{engine_label(self.engine)} {words or 'at its defaults'}"


@dataclass(frozen=True)
class SearchSpace:
    """Knobs of `engine` (the base's) and the values to try for each, in order; `others`: the arms
    of other engines, each a SearchSpace of that engine's knobs (none of its own), tried in turn
    with the base engine's candidates (candidates()). The engine is one more dimension of the search."""

    engine: str
    knobs: tuple[tuple[str, tuple[Any, ...]], ...]
    others: tuple[SearchSpace, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.knobs)

    @property
    def engines(self) -> tuple[str, ...]:
        """Every engine a candidate may run: the base's first (when it has knobs), then the others."""
        return tuple(arm.engine for arm in self.arms())

    def arms(self) -> tuple[SearchSpace, ...]:
        """The space per engine: the base engine's knobs (none: the base itself, no candidate), then
        each other engine's (none: that engine at its defaults, one candidate)."""
        own = (SearchSpace(self.engine, self.knobs),) if self.knobs else ()
        return own + self.others

    def size(self) -> int:
        return sum(math.prod(len(values) for _, values in arm.knobs) for arm in self.arms())

    def candidates(self) -> Iterator[Candidate]:
        """Every candidate: the engines taken in turn (the base's first, then one of each other
        engine's, round after round), each engine's own combinations in order (the first knob
        slowest), so a run that stops at max_trials has measured every engine early."""
        for row in itertools.zip_longest(*(_own(arm) for arm in self.arms())):
            yield from (c for c in row if c is not None)

    def arm(self, engine: str) -> SearchSpace | None:
        return next((a for a in self.arms() if a.engine == engine), None)

    def contains(self, candidate: Candidate) -> bool:
        arm = self.arm(candidate.engine)
        knobs = candidate.knobs
        return arm is not None and set(knobs) == set(arm.names) and all(knobs[n] in v for n, v in arm.knobs)

    def to_dict(self) -> dict[str, list[Any]]:
        """The base engine's knobs ({knob: [values]}: TuningRun.space)."""
        return {name: list(values) for name, values in self.knobs}

    def engines_dict(self) -> dict[str, dict[str, list[Any]]]:
        """The other engines' knobs ({engine: {knob: [values]}}: TuningRun.engines)."""
        return {arm.engine: arm.to_dict() for arm in self.others}

    def describe(self) -> str:
        """The space in words: "parallel in [1, 2]; vLLM: max_num_seqs in [4, 8]"."""
        parts = []
        for arm in self.arms():
            knobs = ", ".join(f"{k} in {v}" for k, v in arm.to_dict().items()) or "its defaults"
            parts.append(knobs if arm.engine == self.engine else f"{engine_label(arm.engine)}: {knobs}")
        return "; ".join(parts)


def _own(arm: SearchSpace) -> Iterator[Candidate]:
    """One engine's candidates: the product of its values, the first knob slowest."""
    for combo in itertools.product(*(values for _, values in arm.knobs)):
        yield Candidate(arm.engine, dict(zip(arm.names, combo, strict=True)))


def tunable(spec: KnobSpec) -> bool:
    return spec.concerns is None and spec.kind not in ("json", "path")


def space_check(
    engine: str,
    space: Mapping[str, Sequence[Any]],
    *,
    engines: Mapping[str, Mapping[str, Sequence[Any]]] | None = None,
    model_format: str = "",
    installed: Collection[str] | None = None,
) -> SearchSpace:
    """`space` ({knob: [values]}) checked against `engine`'s knob specs; TuningInputError naming
    the knob otherwise (unknown, not tunable, a value the engine refuses, a value twice).

    `engines`: other engines to try ({engine: {knob: [values]}}; {} = that engine at its
    defaults), each checked the same way against its own adapter's specs, and allowed only when
    its adapter loads `model_format` (the base model's; "" = not asked) and it is among
    `installed` (the engines the host has; None = not asked). Their refusals name the engine
    (field "engines.<engine>"). With other engines, the base engine's space may be empty."""
    if engines is not None and not isinstance(engines, Mapping):
        raise TuningInputError("engines takes {engine: {knob: [values]}}", field="engines")
    others = tuple(
        _other_arm(engine, str(name), knobs, model_format=model_format, installed=installed)
        for name, knobs in (engines or {}).items()
    )
    own = _arm(engine, space) if space or not others else ()
    result = SearchSpace(engine=engine, knobs=own, others=others)
    if result.size() < 2:
        raise TuningInputError("a search space needs at least two candidates: give a knob two values or more")
    return result


def _adapter(engine: str, field: str) -> CheckedAdapter:
    try:
        adapter = get_adapter(engine)
    except EngineConfigError as exc:
        raise TuningInputError(str(exc), field=field) from None
    if not isinstance(adapter, CheckedAdapter):
        raise TuningInputError(f"{engine}'s knobs are not checked by a knob table", field=field)
    return adapter


def engine_refusal(base: str, engine: str, *, model_format: str, installed: Collection[str] | None) -> str:
    """Why a run from a base of engine `base` may not try `engine` ("" when it may): the base's own
    engine, an adapter that cannot load `model_format` ("" = not asked), an engine not among
    `installed` (None = not asked)."""
    label = engine_label(engine)
    if engine == base:
        return f"{label} is the base's engine: its knobs go in the space itself"
    why = format_refusal(engine, model_format) if model_format else ""
    if why:
        return f"{why}, so it cannot be tried from this base"
    if installed is not None and engine not in installed:
        has = ", ".join(engine_label(e) for e in sorted(installed)) or "none recorded"
        return f"{label} is not installed on the host (its engines: {has}): install it from the host page first"
    return ""


def _other_arm(
    base: str,
    engine: str,
    space: Any,
    *,
    model_format: str,
    installed: Collection[str] | None,
) -> SearchSpace:
    """Another engine's arm, checked: the engine allowed for this base on this host, its knobs."""
    field = f"engines.{engine}"
    adapter = _adapter(engine, field)
    why = engine_refusal(base, engine, model_format=model_format, installed=installed)
    if why:
        raise TuningInputError(why, field=field)
    if not isinstance(space, Mapping):
        raise TuningInputError(f"{adapter.label}: give its knobs as {{knob: [values]}}", field=field)
    try:
        knobs = _arm(engine, space) if space else ()
    except TuningInputError as exc:
        text = str(exc)
        raise TuningInputError(
            text if text.startswith(adapter.label) else f"{adapter.label}: {text}", field=field
        ) from None
    return SearchSpace(engine=engine, knobs=knobs)


def _arm(engine: str, space: Mapping[str, Sequence[Any]]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """One engine's knobs and values, each value checked and normalised by its adapter's spec."""
    adapter = _adapter(engine, "engine")
    specs: Mapping[str, Any] = adapter.knobs
    if not isinstance(space, Mapping) or not space:
        raise TuningInputError("a search space needs at least one knob with values to try, e.g. parallel=1,2,4")
    if len(space) > MAX_KNOBS:
        raise TuningInputError(f"a search space takes at most {MAX_KNOBS} knobs, not {len(space)}")
    knobs: list[tuple[str, tuple[Any, ...]]] = []
    for name, values in space.items():
        spec = specs.get(name) if isinstance(name, str) else None
        if spec is None:
            raise TuningInputError(f"{adapter.label} has no knob {name!r}", field=str(name))
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
    return tuple(knobs)

"""Names that left the routing table, and what serves in their place, so a client that still calls
one is told how to fix its call instead of a bare 404.

A switch replaces the pinned revision `qwen3-coder-r12` with `qwen3-coder-r13`: the alias `coder`
moves, the name `qwen3-coder-r12` leaves. A client that called the name gets

    404 model_not_found  The model `qwen3-coder-r12` is no longer served on this host:
                         `qwen3-coder-r13` (r13) serves in its place; call it by its alias
                         `coder`, which follows switches.

The model that took a name's place is the one that holds most of its aliases now; for a pinned
model whose aliases all left with it, the pinned model that came in. A name never served gets the
list of what the caller may use instead. Only names and aliases the caller's key may use are
shown. The memory is the door's (bounded, lost when it restarts).
"""

from __future__ import annotations

from collections.abc import Callable

from .table import Mode, RoutingTable, ServedModel

__all__ = ["Departed", "not_found_message"]

KEEP = 256  # names remembered
HOPS = 8  # a name replaced, its successor replaced in turn, ...
LISTED = 10  # models named in a 404

Allows = Callable[[str, str], bool]  # (label, model name) -> the caller may use it


class Departed:
    def __init__(self) -> None:
        self._gone: dict[str, str | None] = {}  # label -> the model name serving in its place, or None

    def update(self, old: RoutingTable, new: RoutingTable) -> None:
        """`new` replaces `old`: labels that no longer resolve are remembered with their successor."""
        for label in [label for label in self._gone if new.resolve(label) is not None]:
            del self._gone[label]  # served again
        for model in old.models:
            gone = [label for label in (model.name, *model.aliases) if new.resolve(label) is None]
            if not gone:
                continue
            kept = new.resolve(model.name)
            successor = kept.name if kept is not None else _successor(model, old, new)
            for label in gone:
                self._gone.pop(label, None)
                self._gone[label] = successor
        while len(self._gone) > KEEP:
            del self._gone[next(iter(self._gone))]

    def left(self, label: str) -> bool:
        return label in self._gone

    def successor(self, label: str, table: RoutingTable) -> ServedModel | None:
        """The model serving `label`'s place in `table` now, following later replacements."""
        name = self._gone.get(label)
        for _ in range(HOPS):
            if name is None:
                return None
            model = table.resolve(name)
            if model is not None:
                return model
            name = self._gone.get(name)
        return None


def _successor(model: ServedModel, old: RoutingTable, new: RoutingTable) -> str | None:
    holders: dict[str, int] = {}
    for alias in model.aliases:
        holder = new.resolve(alias)
        if holder is not None:
            holders[holder.name] = holders.get(holder.name, 0) + 1
    if holders:
        return max(holders, key=lambda name: holders[name])
    if model.mode is Mode.PINNED:
        pinned = [m for m in new.models if m.mode is Mode.PINNED]
        came = [m for m in pinned if old.resolve(m.name) is None]
        if came or pinned:
            return (came or pinned)[0].name
    return None


def not_found_message(label: str, table: RoutingTable, departed: Departed, allows: Allows | None = None) -> str:
    """The 404 for `label`: what replaced it, or what the caller may call instead."""
    ok: Allows = allows or (lambda _label, _name: True)
    successor = departed.successor(label, table)
    if successor is not None and any(ok(name, successor.name) for name in _labels(successor)):
        aliases = [alias for alias in successor.aliases if ok(alias, successor.name)]
        if len(aliases) > 1:
            how = f"call it by one of its aliases {_or(aliases)}, which follow switches"
        elif aliases:
            how = f"call it by its alias {_or(aliases)}, which follows switches"
        else:
            how = f"call `{successor.name}`"
        instead = _model(successor, ok)
        return f"The model `{label}` is no longer served on this host: {instead} serves in its place; {how}."
    said = "was removed from this host" if departed.left(label) else "does not exist on this host"
    usable = [model for model in table.models if any(ok(name, model.name) for name in _labels(model))]
    if not usable:
        return f"The model `{label}` {said}; GET /v1/models lists what you may call."
    listed = ", ".join(_model(model, ok) for model in usable[:LISTED])
    more = f" and {len(usable) - LISTED} more (GET /v1/models)" if len(usable) > LISTED else ""
    return f"The model `{label}` {said}; it serves {listed}{more}."


def _labels(model: ServedModel) -> tuple[str, ...]:
    return (model.name, *model.aliases)


def _model(model: ServedModel, ok: Allows) -> str:
    """`qwen3-coder-r13` (r13; aliases `coder`, `fast`), as far as the caller may use them."""
    aliases = [alias for alias in model.aliases if ok(alias, model.name)]
    named = f"`{model.name}`" if ok(model.name, model.name) else "a model"
    facts = ([model.revision] if model.revision else []) + (
        [f"alias{'es' if len(aliases) > 1 else ''} {', '.join(f'`{a}`' for a in aliases)}"] if aliases else []
    )
    return named + (f" ({'; '.join(facts)})" if facts else "")


def _or(labels: list[str]) -> str:
    quoted = [f"`{label}`" for label in labels]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]

"""What the front door serves: one `ServedModel` per revision, in a `RoutingTable` the agent writes.

    {"models": [{"name": "qwen3-coder-r12", "aliases": ["coder"], "upstream": "http://127.0.0.1:8001",
                 "upstream_model": "qwen3-coder", "api_key": "...", "mode": "pinned",
                 "idle_ttl_s": null, "memory": {"gpu0": 23622320128, "gpu1": 23622320128},
                 "engine": "vLLM", "paths": ["/v1/chat/completions", "/v1/responses", ...]}]}

`upstream` is the engine's root URL: the front door appends the request's own path
(`/v1/chat/completions`). `upstream_model` is the name the engine serves (vLLM refuses any other);
requests are rewritten to it, whatever name or alias the client used. `memory` is the planner's
bytes per device ("gpu0", "gpu1", ... or "ram" on a CPU host), compared with what the host's
`free_memory()` reports under the same keys. `api_key` is the engine's own key: sent upstream,
never shown to a client, never in a repr. `revision` is the panel's revision it runs ("r12", or the
panel's number 12), shown to clients that still call a name the table no longer serves. `paths` are
the OpenAI and Anthropic paths its engine answers (the agent writes its adapter's `api_paths`;
`engine` is the engine's name, for the door's answer on any other path); with none (a hand-written
table), every path is passed on and the engine answers for itself.
`threads` (optional) is the CPU threads a CPU engine computes with: engines whose threads together
exceed the host's cores are never loaded side by side.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Mode", "RoutingTable", "ServedModel", "TableError"]


class TableError(ValueError):
    """A routing table that cannot be served (names clash, a bad URL, negative bytes)."""


class Mode(StrEnum):
    PINNED = "pinned"  # loaded at start, never unloaded to make room or when idle
    ON_DEMAND = "on-demand"  # loaded when a request names it; unloaded when idle or for room


@dataclass(frozen=True)
class ServedModel:
    name: str
    upstream: str
    mode: Mode = Mode.ON_DEMAND
    aliases: tuple[str, ...] = ()
    upstream_model: str = ""  # "" = name
    api_key: str | None = field(default=None, repr=False)
    idle_ttl_s: float | None = None  # None: never unloaded for being idle
    memory: Mapping[str, int] = field(default_factory=dict)  # planned bytes per device
    revision: str = ""  # the panel's revision ("r12"), "" when the table does not say
    engine: str = ""  # the engine's name as people write it ("llama.cpp", "vLLM"); "": not said
    paths: frozenset[str] | None = None  # the API paths its engine answers; None: not said (all)
    threads: int | None = None  # CPU threads the engine computes with (a CPU engine's -t); None: not counted

    @property
    def served_name(self) -> str:
        return self.upstream_model or self.name

    def serves(self, path: str) -> bool:
        """Whether its engine answers `path` (its paths; when the table does not say: yes)."""
        return self.paths is None or path in self.paths

    def url(self, path: str) -> str:
        return self.upstream.rstrip("/") + path

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServedModel:
        try:
            mode = Mode(data.get("mode", Mode.ON_DEMAND))
        except ValueError as exc:
            raise TableError(f"model {data.get('name')!r}: mode must be pinned or on-demand") from exc
        ttl = data.get("idle_ttl_s")
        model = cls(
            name=str(data.get("name") or ""),
            upstream=str(data.get("upstream") or ""),
            mode=mode,
            aliases=tuple(str(a) for a in data.get("aliases") or ()),
            upstream_model=str(data.get("upstream_model") or ""),
            api_key=data.get("api_key") or None,
            idle_ttl_s=None if ttl is None else float(ttl),
            memory={str(k): int(v) for k, v in (data.get("memory") or {}).items()},
            revision=_revision(data.get("revision")),
            engine=str(data.get("engine") or ""),
            paths=_paths(data.get("paths")),
            threads=_threads(data.get("threads")),
        )
        model.check()
        return model

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "aliases": list(self.aliases),
            "upstream": self.upstream,
            "upstream_model": self.upstream_model,
            "api_key": self.api_key,
            "mode": str(self.mode),
            "idle_ttl_s": self.idle_ttl_s,
            "memory": dict(self.memory),
            "revision": self.revision,
            "engine": self.engine,
            "paths": None if self.paths is None else sorted(self.paths),
            "threads": self.threads,
        }

    def check(self) -> None:
        if not self.name.strip():
            raise TableError("a served model needs a name")
        parts = urlsplit(self.upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TableError(f"model {self.name!r}: upstream must be an http(s) URL, not {self.upstream!r}")
        if self.idle_ttl_s is not None and self.idle_ttl_s <= 0:
            raise TableError(f"model {self.name!r}: idle_ttl_s must be positive (or null: never)")
        if self.threads is not None and self.threads < 1:
            raise TableError(f"model {self.name!r}: threads must be at least 1 (or null: not counted)")
        bad = [device for device, size in self.memory.items() if size < 0]
        if bad:
            raise TableError(f"model {self.name!r}: negative planned memory on {', '.join(bad)}")


def _paths(value: Any) -> frozenset[str] | None:
    """A list of API paths, or None (not said: every path passes)."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise TableError(f"paths must be a list of API paths, not {value!r:.60}")
    return frozenset(value)


def _threads(value: Any) -> int | None:
    """A whole number of CPU threads, or None (not counted)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TableError(f"threads must be a whole number, not {value!r:.60}")
    return value


def _revision(value: Any) -> str:
    """ "r12" from the panel's number 12 (its serving document's `revision`), else the text given."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"r{value}"
    return str(value or "")[:64]


@dataclass(frozen=True)
class RoutingTable:
    models: tuple[ServedModel, ...] = ()
    _by_label: dict[str, ServedModel] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        seen: dict[str, str] = {}
        for model in self.models:
            for label in (model.name, *model.aliases):
                if not label.strip():
                    raise TableError(f"model {model.name!r}: an empty alias")
                if label in seen:
                    raise TableError(f"{label!r} names two models ({seen[label]} and {model.name})")
                seen[label] = model.name
        named = {m.name: m for m in self.models}
        self._by_label.update({label: named[owner] for label, owner in seen.items()})

    def resolve(self, label: str) -> ServedModel | None:
        """The model a request's `model` names, by its name or one of its aliases."""
        return self._by_label.get(label)

    def names(self) -> list[str]:
        return [m.name for m in self.models]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RoutingTable:
        models = data.get("models")
        if not isinstance(models, list):
            raise TableError('a routing table is {"models": [...]}')
        return cls(tuple(ServedModel.from_dict(m) for m in models))

    @classmethod
    def from_json(cls, text: str) -> RoutingTable:
        try:
            return cls.from_dict(json.loads(text))
        except (json.JSONDecodeError, AttributeError, TypeError) as exc:
            raise TableError(f"not a routing table: {exc}") from exc

    def to_dict(self) -> dict[str, Any]:
        return {"models": [m.to_dict() for m in self.models]}

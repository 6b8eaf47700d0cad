"""The revision view: the plain facts of one revision that diffs and client exports read.

A view is built by the caller (a presenter reading rows, or a test) from plain data:
no Django, no I/O here. Secrets are only ever *named* (`api_key_secret`,
`hf_token_secret`); env values whose names look secret are masked wherever a view is
rendered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from core.secrets_mask import mask_env
from serving.arch import ModelArch
from serving.engines.registry import engine_label as label_of


def engine_label(engine: str) -> str:
    return label_of(engine) if engine else "unknown engine"


@dataclass(frozen=True)
class RevisionView:
    """One revision as plain data. `model` holds ModelVariant fields, `arch` = ModelArch.to_dict()."""

    number: int | None = None
    tag: str = ""
    engine: str = ""
    engine_version: str = ""
    served_name: str = ""  # effective: what clients must send as "model" (precomputed by the caller)
    port: int | None = None
    knobs: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, Any] = field(default_factory=dict)
    api_key_secret: str = ""
    hf_token_secret: str = ""
    message: str = ""
    author: str = ""
    created_at: str = ""  # ISO 8601
    model: Mapping[str, Any] = field(default_factory=dict)
    planner: Mapping[str, Any] | None = None  # FitReport.to_dict()
    benchmarks: Sequence[Mapping[str, Any]] = ()  # newest first; each has profile_name and levels
    argv: Sequence[str] | None = None  # masked launch argv
    served_context: int | None = None  # measured (e.g. /props n_ctx); overrides what knobs imply
    # {device: {"planned": bytes, "peak": bytes}}: the planner's and the host's measured memory
    memory: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RevisionView:
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        for key in ("knobs", "env", "model", "memory"):
            if values.get(key) is None:
                values.pop(key, None)
        if values.get("benchmarks") is None:
            values.pop("benchmarks", None)
        else:
            values["benchmarks"] = tuple(values["benchmarks"])
        if values.get("argv") is not None:
            values["argv"] = tuple(str(a) for a in values["argv"])
        return cls(**values)

    @property
    def label(self) -> str:
        base = f"r{self.number}" if self.number is not None else "revision"
        return f"{base} ({self.tag})" if self.tag else base

    @property
    def arch(self) -> ModelArch:
        try:
            return ModelArch.from_dict(self.model.get("arch") or {})
        except TypeError:
            return ModelArch()

    @property
    def model_name(self) -> str:
        return str(self.model.get("name") or self.model.get("repo_id") or self.model.get("gguf_file") or "")

    @property
    def masked_env(self) -> dict[str, str]:
        return mask_env(self.env)

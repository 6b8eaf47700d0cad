"""Inference keys: who may call the front door, and for which models.

The table holds SHA-256 digests, never keys: a key is a random token of 32 bytes or more (made by
the panel, shown once), so a fast digest is as safe as a slow password hash and costs a
microsecond per request. Allowed models are names or aliases; a key allowed an alias follows it
when a switch moves the alias.

    {"keys": [{"name": "aider-alice", "sha256": "<hex>", "models": ["coder", "fast"]},
              {"name": "ci", "sha256": "<hex>", "models": null}]}     # null: every model

With no key in the table the front door is open to whoever reaches its bind address.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["InferenceKey", "KeyTable", "hash_key"]


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class InferenceKey:
    name: str
    sha256: str = field(repr=False)
    models: frozenset[str] | None = None  # None: every model

    def allows(self, requested: str, model: str) -> bool:
        """`requested`: the name the client sent (maybe an alias); `model`: the model it resolves to."""
        return self.models is None or requested in self.models or model in self.models


@dataclass(frozen=True)
class KeyTable:
    keys: tuple[InferenceKey, ...] = ()
    _by_digest: dict[str, InferenceKey] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        for key in self.keys:
            digest = key.sha256.lower()
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError(f"key {key.name!r}: sha256 must be 64 hex digits")
            if digest in self._by_digest:
                raise ValueError(f"keys {self._by_digest[digest].name!r} and {key.name!r} are the same key")
            self._by_digest[digest] = key

    @property
    def open(self) -> bool:
        return not self.keys

    def find(self, authorization: str | None) -> InferenceKey | None:
        """The key an `Authorization: Bearer <key>` header carries, or None."""
        scheme, _, token = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        return self._by_digest.get(hash_key(token.strip()))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KeyTable:
        rows = data.get("keys")
        if not isinstance(rows, list):
            raise ValueError('a key table is {"keys": [...]}')
        return cls(
            tuple(
                InferenceKey(
                    name=str(row["name"]),
                    sha256=str(row["sha256"]),
                    models=None if row.get("models") is None else frozenset(str(m) for m in row["models"]),
                )
                for row in rows
            )
        )

    @classmethod
    def from_json(cls, text: str) -> KeyTable:
        return cls.from_dict(json.loads(text))

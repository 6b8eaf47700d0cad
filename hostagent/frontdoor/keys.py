"""Inference keys: who may call the front door, and for which models.

The table holds SHA-256 digests, never keys: a key is a random token of 32 bytes or more (made by
the panel, shown once), so a fast digest is as safe as a slow password hash and costs a
microsecond per request. Allowed models are names or aliases; a key allowed an alias follows it
when a switch moves the alias.

    {"keys": [{"name": "aider-alice", "sha256": "<hex>", "models": ["coder", "fast"]},
              {"name": "ci", "sha256": "<hex>", "models": null}]}     # null: every model

The panel's table also says the lab's door mode (docs/front-door.md, "Inference keys and usage"):

    {"mode": "keys_required", "keys": [...]}   # every request needs a key in the table; none: 401
    {"mode": "open", "keys": [...]}            # anyone who reaches the bind address is let in

A table with no "mode" (from a panel before the mode, or a standalone door's file) is open
exactly when it holds no key. A key is sent as `Authorization: Bearer <key>` (OpenAI clients) or
`x-api-key: <key>` (Anthropic clients).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KEYS_REQUIRED", "MODES", "NO_KEY_MESSAGE", "OPEN", "InferenceKey", "KeyTable", "hash_key"]

OPEN, KEYS_REQUIRED = "open", "keys_required"
MODES = (OPEN, KEYS_REQUIRED)
# What a refused client reads (the door's and the router's 401).
NO_KEY_MESSAGE = "A valid inference key is required: Authorization: Bearer <key>, or x-api-key: <key>."
KEY_HEADERS = ("authorization", "x-api-key")


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
    mode: str | None = None  # OPEN or KEYS_REQUIRED; None: open exactly when no key (an older table)
    _by_digest: dict[str, InferenceKey] = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in MODES:
            raise ValueError(f"the door mode is one of {', '.join(MODES)}, not {self.mode!r}")
        for key in self.keys:
            digest = key.sha256.lower()
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError(f"key {key.name!r}: sha256 must be 64 hex digits")
            if digest in self._by_digest:
                raise ValueError(f"keys {self._by_digest[digest].name!r} and {key.name!r} are the same key")
            self._by_digest[digest] = key

    @property
    def open(self) -> bool:
        """Requests need no key: the open mode, or no mode and no key."""
        return self.mode == OPEN if self.mode is not None else not self.keys

    def find(self, headers: Mapping[str, str]) -> InferenceKey | None:
        """The key a request's headers carry (`Authorization: Bearer <key>` or `x-api-key: <key>`,
        names in any case), or None."""
        for name, value in headers.items():
            lowered = name.lower()
            if lowered not in KEY_HEADERS:
                continue
            if lowered == "authorization":
                scheme, _, value = value.strip().partition(" ")
                if scheme.lower() != "bearer":
                    continue
            token = value.strip()
            if token and (key := self._by_digest.get(hash_key(token))) is not None:
                return key
        return None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KeyTable:
        rows, mode = data.get("keys"), data.get("mode")
        if not isinstance(rows, list):
            raise ValueError('a key table is {"keys": [...]}')
        if mode is not None and mode not in MODES:
            raise ValueError(f"the door mode is one of {', '.join(MODES)}, not {str(mode)[:40]!r}")
        return cls(
            tuple(
                InferenceKey(
                    name=str(row["name"]),
                    sha256=str(row["sha256"]),
                    models=None if row.get("models") is None else frozenset(str(m) for m in row["models"]),
                )
                for row in rows
            ),
            mode,
        )

    @classmethod
    def from_json(cls, text: str) -> KeyTable:
        return cls.from_dict(json.loads(text))

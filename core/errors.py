"""Errors shared by every app."""

from __future__ import annotations


class ImmutableError(RuntimeError):
    """Raised when code tries to change a row that is history."""

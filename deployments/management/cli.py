"""Shared pieces of the command-line tools: argument parsing and following an operation."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from deployments.choices import ACTIVE_STATES
from deployments.models import Operation
from hardware.models import Host


class BadInput(CommandError):
    """Exit status 2: the arguments are wrong (the message says how)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, returncode=2)


def parse_value(text: str) -> Any:
    """`8192` -> int, `0.95` -> float, `true` -> True, `{"a":1}` -> dict; anything else stays text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_pairs(pairs: list[str] | None, *, what: str, typed: bool) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise BadInput(f"{what} {pair!r} is not NAME=VALUE.")
        result[name.strip()] = parse_value(value) if typed else value
    return result


def get_host(name: str) -> Host:
    try:
        return Host.objects.select_related("active_revision").get(name=name)
    except Host.DoesNotExist:
        known = ", ".join(Host.objects.values_list("name", flat=True)) or "none"
        raise BadInput(f"No host named {name!r} (known: {known}).") from None


def get_actor(username: str | None) -> Any:
    if not username:
        return None  # the machine's own administrator, acting from its shell
    try:
        return get_user_model().objects.get(username=username)
    except get_user_model().DoesNotExist:
        raise BadInput(f"No user named {username!r}.") from None


def follow(op: Operation, *, timeout: float | None, write: Callable[[str], None], poll: float = 0.25) -> Operation:
    """Print the operation's new log lines as they come, until it ends or `timeout` passes."""
    deadline = None if timeout is None else time.monotonic() + timeout
    shown = 0
    while True:
        op.refresh_from_db()
        if len(op.log) > shown:
            for line in op.log[shown:].rstrip("\n").splitlines():
                write(line)
            shown = len(op.log)
        if op.state not in ACTIVE_STATES:
            return op
        if deadline is not None and time.monotonic() > deadline:
            raise CommandError(f"Still {op.state} after {timeout:.0f} s (operation {op.pk}).", returncode=5)
        time.sleep(poll)

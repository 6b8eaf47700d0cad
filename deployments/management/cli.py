"""Shared pieces of the command-line tools: the base command that turns every kind of bad
input into exit status 2 with one line, argument parsing, and following an operation."""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DataError

from controlpanel.params import parse_int
from core.context import change_context
from deployments.choices import ACTIVE_STATES
from deployments.models import DeploymentRevision, Operation
from deployments.services.gates import gate_from_input
from hardware.models import Host
from serving.safety import UnsafeValueError, check_json_value


class BadInput(CommandError):
    """Exit status 2: the arguments are wrong (the message says how), on one line."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message), returncode=2)


def one_line(text: str, *, limit: int = 2_000) -> str:
    line = "; ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def describe(exc: BaseException) -> str:
    """An input error's message, for one line on stderr."""
    if isinstance(exc, ValidationError):
        if hasattr(exc, "error_dict"):
            return "; ".join(
                f"{key}: {', '.join(messages)}" if key != "__all__" else ", ".join(messages)
                for key, messages in exc.message_dict.items()
            )
        return "; ".join(exc.messages)
    if isinstance(exc, PermissionDenied):
        return f"Permission denied: {exc}" if str(exc) else "Permission denied."
    if isinstance(exc, DataError):
        return "A value is out of range for the database; nothing was stored."
    field = getattr(exc, "field", None)
    text = str(exc).strip("'\"") or type(exc).__name__
    return f"{field}: {text}" if field and not text.startswith(str(field)) else text


# What a command may meet on bad input: the services' ValidationError and PermissionDenied, the
# domain core's errors (PlanInputError, EngineConfigError, UnsafeValueError, ... are all
# ValueErrors), numbers too large to convert, and a value the database refuses (the statement
# fails and the services' transactions roll back, so nothing is stored).
INPUT_ERRORS: tuple[type[BaseException], ...] = (
    ValidationError,
    PermissionDenied,
    ValueError,
    OverflowError,
    DataError,
)


class PanelParser(CommandParser):
    """Called from code (`call_command`), argparse's refusals carry exit status 2 as well, as
    they do from a shell."""

    def error(self, message: str) -> Any:
        if self.called_from_command_line:
            return super().error(message)
        raise BadInput(f"Error: {message}")


MAX_WAIT_S = 7 * 24 * 3600.0  # --timeout: a week is longer than any install, switch or benchmark


class PanelCommand(BaseCommand):
    """Base of the panel's commands: any input error ends in exit status 2 and one line on
    stderr (`CommandError`), never a traceback (`--traceback` still shows where it came from)."""

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        todo = [parser]
        while todo:  # the parser and its subcommands' parsers: only `error` differs
            current = todo.pop()
            current.__class__ = PanelParser
            for action in current._actions:
                if isinstance(action, argparse._SubParsersAction):
                    todo.extend(action.choices.values())
        return parser

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except CommandError as exc:
            if "\n" in str(exc):
                raise CommandError(one_line(str(exc)), returncode=exc.returncode) from exc
            raise
        except INPUT_ERRORS as exc:
            raise BadInput(describe(exc)) from exc

    def queued(self, op: Operation, what: str, *, wait: bool, timeout: float | None) -> Operation | None:
        """Say `what` is queued as the operation, and when no agent listens on the host's queue;
        with `wait`, follow the operation's log until it ends and return it (None without)."""
        self.stdout.write(f"{what} queued as operation {op.pk}.")
        if not op.host.is_online:
            self.stdout.write(self.style.WARNING(f"No worker listens on {op.host.queue}: start the host's agent."))
        return follow(op, timeout=timeout, write=self.stdout.write) if wait else None


Actions = argparse._SubParsersAction  # what `add_actions` adds a command's subcommands to


class ActionCommand(PanelCommand):
    """A command of subcommands (`manage.py key create|list|revoke`): `add_actions` declares
    them (`actions.add_parser`, `host_action`, `named_action`); `handle` runs the method named
    after the one given (`do_list` for list, `do_broker_user` for broker-user) with the options,
    in the command line's change context (its audit rows say `cli`)."""

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_actions(parser.add_subparsers(dest="action", required=True))

    def add_actions(self, actions: Actions[Any]) -> None:
        raise NotImplementedError

    def handle(self, *args: str, **options: Any) -> None:
        run: Callable[[dict[str, Any]], None] = getattr(self, "do_" + options["action"].replace("-", "_"))
        with change_context("cli"):
            run(options)


# --- argument types (argparse rejects what they refuse with exit status 2) ----------------------


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: ASCII digits only, within [low, high]."""

    def parse(text: str) -> int:
        try:
            return parse_int(text, name="it", minimum=low, maximum=high)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "whole number"
    return parse


def bounded_float(low: float, high: float) -> Callable[[str], float]:
    """An argparse type: a finite number within [low, high] (no inf, no nan)."""

    def parse(text: str) -> float:
        try:
            number = float(text) if len(text) <= 40 else math.nan
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number") from None
        if not math.isfinite(number) or not low <= number <= high:
            raise argparse.ArgumentTypeError(f"must be a finite number from {low:g} to {high:g}, not {text[:40]!r}")
        return number

    parse.__name__ = "number"
    return parse


def host_action(actions: Actions[Any], name: str, help: str | None = None) -> CommandParser:
    """A subcommand (from `parser.add_subparsers()`) that acts on one host: `--host NAME`, required."""
    action: CommandParser = actions.add_parser(name, help=help)
    action.add_argument("--host", required=True)
    return action


def named_action(actions: Actions[Any], name: str, help: str | None = None, *, host: bool = True) -> CommandParser:
    """A subcommand that changes one named thing: NAME, `--host NAME` when the thing is a host's
    (`host_action`), and `--user`."""
    action = host_action(actions, name, help) if host else actions.add_parser(name, help=help)
    action.add_argument("name")
    add_user_option(action)
    return action


def add_user_option(parser: CommandParser) -> None:
    """`--user`: who acts (default: the machine's own administrator, acting from its shell)."""
    parser.add_argument("--user", default=None, help="act as this user (roles apply)")


def add_operation_options(parser: CommandParser) -> None:
    """The options of a command that queues an operation: --wait, --timeout and --user."""
    parser.add_argument("--wait", action="store_true", help="follow the operation's log until it ends")
    parser.add_argument(
        "--timeout", type=bounded_float(0, MAX_WAIT_S), default=None, help="seconds to wait (with --wait)"
    )
    add_user_option(parser)


def add_gate_options(parser: CommandParser, *, what: str = "the switch") -> None:
    """--gate PROFILE --max-drop LIMITS: a benchmark gate (read back with gate_option)."""
    parser.add_argument(
        "--gate", metavar="PROFILE", default=None, help=f"a benchmark gate: the named profile to run after {what}"
    )
    parser.add_argument(
        "--max-drop",
        metavar="LIMITS",
        default=None,
        help="the gate's limits in percent: decode and throughput at most that much below the previous "
        "revision, ttft_p95 and j_per_token at most that much above, e.g. decode=5,ttft_p95=10",
    )


def gate_option(options: dict[str, Any]) -> Any:
    """The GateRequest --gate and --max-drop give, or None without them (BadInput when one comes
    without the other, or either is bad)."""
    if (options["gate"] is None) != (options["max_drop"] is None):
        raise BadInput("--gate and --max-drop go together: a profile to run and the limits it must keep.")
    if options["gate"] is None:
        return None

    try:
        return gate_from_input(profile=options["gate"], limits=options["max_drop"])
    except ValidationError as exc:
        raise BadInput("; ".join(exc.messages)) from exc


def gate_lines(verdict: dict[str, Any] | None) -> list[str]:
    """A gate's comparison, one line a figure, as the commands print it."""
    lines = []
    for row in (verdict or {}).get("rows", []):
        judged = "not judged" if row["passed"] is None else ("within" if row["passed"] else "BEYOND")
        lines.append(f"  {row['label']} ({row['level']}): {judged}: {row['note']}")
    return lines


def parse_value(text: str) -> Any:
    """`8192` -> int, `0.95` -> float, `true` -> True, `{"a":1}` -> dict; anything else stays text.

    `NaN`, `Infinity`, NUL, absurd depth or size are refused (BadInput), as in the web forms."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError:
        value = text
    except ValueError as exc:  # a 5,000-digit number, NaN, Infinity
        why = "a number with more digits than any setting takes" if "digits" in str(exc) else str(exc)
        raise BadInput(f"{text[:40]!r} is not a value: {why}") from None
    try:
        return check_json_value(value, field="value")
    except UnsafeValueError as exc:
        raise BadInput(f"{text[:40]!r}: {exc}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def parse_pairs(pairs: list[str] | None, *, what: str, typed: bool) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise BadInput(f"{what} {pair!r} is not NAME=VALUE.")
        if typed:
            try:
                result[name.strip()] = parse_value(value)
            except BadInput as exc:
                raise BadInput(f"{what} {name.strip()[:60]}: {exc}") from None
        else:
            result[name.strip()] = value
    return result


def get_host(name: str) -> Host:
    try:
        return Host.objects.select_related("deployment__active_revision").get(name=name)
    except Host.DoesNotExist:
        known = ", ".join(Host.objects.values_list("name", flat=True)) or "none"
        raise BadInput(f"No host named {name!r} (known: {known}).") from None


def get_revision(host: Host, number: int) -> DeploymentRevision:
    revision = host.revisions.filter(number=number).first()
    if revision is None:
        raise BadInput(f"{host.name} has no revision r{number}.")
    return revision


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

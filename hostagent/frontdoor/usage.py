"""Usage per key, per model, per day (UTC): requests, prompt and completion tokens, errors.

Token counts are the engine's own (`usage` of each answer; for a stream, the usage chunk the
front door asks for with `stream_options.include_usage`). A stream that ends without one (its
client hung up between the last content event and llama.cpp's separate usage event, or an engine
that sends none) is booked what the door counted on the way: one completion token per content
delta (UsageStream.booked). Totals only grow, so the agent can send them as they are and the panel
keep the latest per (day, key, model): a report sent twice changes nothing. Days older than
KEEP_DAYS are dropped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime, timedelta
from typing import Any

__all__ = ["LONGEST_END", "OPEN_KEY", "UsageLedger", "UsageRow", "UsageStream", "ends_stream", "tokens_of"]

KEEP_DAYS = 31
OPEN_KEY = ""  # the key name recorded when the front door has no key table


@dataclass
class UsageRow:
    """One running total (the agent reports it as serving.agent_reports.UsageTotal)."""

    day: str
    key: str
    model: str
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    errors: int = 0


def _today() -> date:
    return datetime.now(UTC).date()


class UsageLedger:
    def __init__(self, today: Callable[[], date] = _today) -> None:
        self._today = today
        self._rows: dict[tuple[str, str, str], UsageRow] = {}

    def record(self, *, key: str, model: str, prompt_tokens: int = 0, completion_tokens: int = 0, ok: bool) -> None:
        day = self._today()
        at = (day.isoformat(), key, model)
        row = self._rows.get(at)
        if row is None:
            self._prune(day)
            row = self._rows[at] = UsageRow(*at)
        row.requests += 1
        row.prompt_tokens += prompt_tokens
        row.completion_tokens += completion_tokens
        row.errors += 0 if ok else 1

    def _prune(self, today: date) -> None:
        oldest = (today - timedelta(days=KEEP_DAYS)).isoformat()
        for at in [at for at in self._rows if at[0] < oldest]:
            del self._rows[at]

    def rows(self) -> list[UsageRow]:
        """Copies of the totals, by day, key and model."""
        return [
            UsageRow(**{f.name: getattr(row, f.name) for f in fields(row)}) for _, row in sorted(self._rows.items())
        ]

    def restore(self, rows: Iterable[UsageRow]) -> None:
        """Take back totals kept from an earlier run (the agent restarted), so they keep growing."""
        for row in rows:
            at = (row.day, row.key, row.model)
            if at not in self._rows or self._rows[at].requests < row.requests:
                self._rows[at] = row
        self._prune(self._today())


# The stream's last event, at the start of a line (a model that writes "[DONE]" says so inside a
# JSON string, on its event's one line): chat's and completions' `data: [DONE]`, Anthropic's
# `message_stop`, the Responses API's `response.completed` (or `.failed`, `.incomplete`).
_DONE = re.compile(
    rb"(?:^|\n)(?:data: ?\[DONE\]|event: ?(?:message_stop|response\.(?:completed|failed|incomplete))\r?\n)"
)
LONGEST_END = len(b"\nevent: response.incomplete\r\n")  # what a reader keeps of one read for the next


def ends_stream(data: bytes) -> bool:
    """Whether `data` (what is written to a streaming client) carries the stream's end event
    (`data: [DONE]`, `event: message_stop`, `event: response.completed`): once it is handed over,
    the client has the whole answer."""
    return bool(_DONE.search(data))


def _event_end(data: bytes) -> int:
    """Index just past the last complete server-sent event in `data`, or -1."""
    lf = data.rfind(b"\n\n")
    crlf = data.rfind(b"\r\n\r\n")
    return max(lf + 2 if lf >= 0 else -1, crlf + 4 if crlf >= 0 else -1)


# One streamed delta that carries generated text: a data line with a non-empty string under a key
# an engine writes generated text in (chat `content`, `reasoning_content` / `reasoning`, a tool
# call's `arguments`, completions' and Anthropic's `text`, Anthropic's `thinking` and a tool's
# `partial_json`, the Responses API's `delta`). Inside a JSON string a quote is escaped, so the
# key's quotes match only the JSON's own keys, never text a model writes. One match per line (^).
# (A Responses stream also repeats its text whole in three `.done` events: counted too, they book
# three tokens more, and only when its `response.completed` never came.)
_DELTA = re.compile(
    rb'^data:[^\n]*?"(?:content|reasoning_content|reasoning|arguments|text|thinking|partial_json|delta)"'
    rb'[ \t]*:[ \t]*"(?!")',
    re.MULTILINE,
)
# Where a stream's events carry usage: at the top (chat's usage chunk, Anthropic's message_delta),
# in Anthropic's `message_start.message`, in the Responses API's `response.completed.response`.
_USAGE_IN = ("message", "response")


class UsageStream:
    """Reads the `usage` of a streamed answer as its events pass, without holding them back.

    Events are passed on as soon as they are complete (a read from the engine usually ends on an
    event's end); only events that mention "usage" are parsed. With `strip`, the usage-only event
    the front door asked for (`choices: []`) is dropped, since the client did not ask for it.

    It also counts the deltas that carry generated text since the last usage it read, for
    `booked()`: llama.cpp and vLLM stream one token per delta event (vLLM may join a few when
    it holds back half a UTF-8 character or decodes speculatively), so the count is what the
    client was sent, at worst a little under the engine's own.
    """

    FLUSH_BYTES = 1 << 16  # a partial event longer than this is passed on as it is

    def __init__(self, *, strip: bool) -> None:
        self.strip = strip
        self.usage: dict[str, Any] | None = None
        self.deltas = 0  # text deltas passed on after the last usage read (all of them, without one)
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk if self._pending else chunk
        end = _event_end(data)
        if end < 0:
            if len(data) > self.FLUSH_BYTES:
                self._pending = b""
                return self._read(data)
            self._pending = data
            return b""
        complete, self._pending = data[:end], data[end:]
        return self._read(complete)

    def close(self) -> bytes:
        rest, self._pending = self._pending, b""
        return self._read(rest)

    def booked(self) -> dict[str, Any] | None:
        """The usage to book: the engine's, plus a completion token for each text delta passed
        on after it; without one, the deltas counted (prompt tokens unknown: none)."""
        if not self.deltas:
            return self.usage
        usage = dict(self.usage or {})
        name = "output_tokens" if "output_tokens" in usage else "completion_tokens"
        before = usage.get(name)
        usage[name] = (before if isinstance(before, int) and before >= 0 else 0) + self.deltas
        return usage

    def _read(self, events: bytes) -> bytes:
        if b'"usage"' not in events:
            self.deltas += len(_DELTA.findall(events))
            return events
        return self._scan(events)

    def _scan(self, events: bytes) -> bytes:
        kept: list[bytes] = []
        for event in events.replace(b"\r\n", b"\n").split(b"\n\n"):
            if event.strip() and b'"usage"' in event:
                seen, drop = self._take(event)
                if seen:
                    self.deltas = 0  # the engine's usage counts every token it sent so far
                else:
                    self.deltas += len(_DELTA.findall(event))
                if drop:
                    continue
            else:
                self.deltas += len(_DELTA.findall(event))
            kept.append(event)
        return b"\n\n".join(kept)

    def _take(self, event: bytes) -> tuple[bool, bool]:
        """Note the event's usage: (whether it had one, whether the event is to be dropped)."""
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            try:
                payload = json.loads(line[5:])
            except ValueError:
                return False, False
            if not isinstance(payload, dict):
                return False, False
            usage = payload.get("usage")
            for outer in _USAGE_IN:
                if not isinstance(usage, dict) and isinstance(payload.get(outer), dict):
                    usage = payload[outer].get("usage")
            if not isinstance(usage, dict):
                return False, False
            # Anthropic's message_delta carries the output count alone, its message_start the input.
            self.usage = {**self.usage, **usage} if self.usage else usage
            return True, self.strip and not payload.get("choices")
        return False, False


def tokens_of(usage: dict[str, Any] | None) -> tuple[int, int]:
    """(prompt, completion) tokens of an engine's `usage` (embeddings have no completion): OpenAI's
    `prompt_tokens`/`completion_tokens`, or the Responses API's and Anthropic's
    `input_tokens`/`output_tokens`; Anthropic counts the input read from or written to its cache
    apart from `input_tokens`, so those are added (the prompt the engine took, as chat counts it)."""
    if not usage:
        return 0, 0

    def count(name: str) -> int:
        value = usage.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return count("prompt_tokens"), count("completion_tokens")
    prompt = count("input_tokens")
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:  # Anthropic's
        prompt += count("cache_read_input_tokens") + count("cache_creation_input_tokens")
    return prompt, count("output_tokens")

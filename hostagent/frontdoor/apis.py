"""The APIs the front door and the lab router route, one `Api` per path: which family's error shape
it answers in, whether it streams, how its body names the model, where its usage sits.

    OpenAI     /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses,
               /v1/responses/input_tokens, /v1/rerank, /v1/audio/transcriptions (multipart)
    Anthropic  /v1/messages, /v1/messages/count_tokens

Every answer of ours (the door's and the router's: a bad key, an unknown model, a full queue) is
written as OpenAI's error by `proxy.error_response`; on an Anthropic path `server.py` rewrites it,
and an engine's OpenAI-shaped error too (llama-server answers `/v1/messages` so), as Anthropic's
`{"type": "error", "error": {"type": ..., "message": ...}}` (`anthropic_error`), which the
`anthropic` SDK and Claude Code read.

A stream broken off mid-answer ends with an error event in its API's own stream format
(`cut_event`), on which that API's clients fail.

A multipart body (`/v1/audio/transcriptions`) is kept as it came, byte for byte, but for the
`model` field's value (`Form`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from aiohttp.helpers import parse_mimetype
from aiohttp.multipart import parse_content_disposition

__all__ = [
    "ANTHROPIC",
    "APIS",
    "OPENAI",
    "Api",
    "BodyError",
    "CUT_TAIL",
    "STREAM_CUT",
    "Form",
    "anthropic_error",
    "api_of",
    "cut_event",
    "encode_body",
    "ends_with_cut",
]

OPENAI, ANTHROPIC = "openai", "anthropic"
MESSAGES = "/v1/messages"


@dataclass(frozen=True)
class Api:
    path: str
    family: str  # OPENAI or ANTHROPIC: the error shape it answers in
    streams: bool = False  # reads `stream` (flags.py normalises it)
    usage_option: bool = False  # `stream_options.include_usage` asks for the stream's usage chunk
    multipart: bool = False  # multipart/form-data, the model a form field


APIS: dict[str, Api] = {
    api.path: api
    for api in (
        Api("/v1/chat/completions", OPENAI, streams=True, usage_option=True),
        Api("/v1/completions", OPENAI, streams=True, usage_option=True),
        Api("/v1/embeddings", OPENAI),
        Api("/v1/responses", OPENAI, streams=True),  # usage in `response.completed`
        Api("/v1/responses/input_tokens", OPENAI),
        Api("/v1/rerank", OPENAI),
        Api("/v1/audio/transcriptions", OPENAI, multipart=True),
        Api("/v1/messages", ANTHROPIC, streams=True),  # usage in `message_start` and `message_delta`
        Api("/v1/messages/count_tokens", ANTHROPIC),
    )
}


def api_of(path: str) -> Api | None:
    return APIS.get(path)


# -- errors -----------------------------------------------------------------------------------------

# Anthropic's error types by HTTP status (docs.anthropic.com, "Errors"); 529 is its overloaded.
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


def anthropic_error(status: int, body: bytes) -> bytes | None:
    """An OpenAI-shaped error body (`{"error": {"message": ...}}`) as Anthropic's, for an answer of
    `status`; None when `body` is no such error (already Anthropic's, or something else)."""
    try:
        value = json.loads(body)
    except ValueError:
        return None
    error = value.get("error") if isinstance(value, dict) else None
    if not isinstance(error, dict) or value.get("type") == "error":
        return None
    message = error.get("message")
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    answer = {"type": "error", "error": {"type": kind, "message": str(message if message is not None else "")}}
    return json.dumps(answer).encode()


# -- a stream cut mid-answer -----------------------------------------------------------------------

STREAM_CUT = "upstream_stream_cut"  # the error code of a stream that broke off mid-answer
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d+)')


def cut_event(path: str, message: str, *, tail: bytes = b"") -> bytes:
    """The error event that ends a stream of `path` broken off mid-answer, in its API's format;
    `tail` is the end of what was written before it. Each ends with bytes of its own, so the lab
    router knows a door's (ends_with_cut).

    - Anthropic (`/v1/messages`): `event: error` with Anthropic's error, on which the `anthropic`
      SDK raises and Claude Code stops; its end is `"type": "api_error"}}`.
    - Responses: `event: error` with a ResponseErrorEvent (openai/types/responses/
      response_error_event.py), its `sequence_number` the one after the last in `tail` (left out
      when none is there); the `openai` client hands it over as the stream's last event, then
      raises on the unfinished body (cut_stream).
    - Chat, completions: `data: {"error": {...}}`, on which the `openai` client raises APIError
      (its _streaming.py)."""
    api = api_of(path)
    if api is not None and api.family == ANTHROPIC:
        anthropic = {"type": "error", "error": {"message": message, "type": "api_error"}}
        return b"event: error\ndata: " + json.dumps(anthropic).encode() + b"\n\n"
    if api is not None and api.path == "/v1/responses":
        responses: dict[str, Any] = {"type": "error", "message": message, "param": None}
        numbers = _SEQUENCE.findall(tail)
        if numbers:
            responses["sequence_number"] = int(numbers[-1]) + 1
        responses["code"] = STREAM_CUT
        return b"event: error\ndata: " + json.dumps(responses).encode() + b"\n\n"
    openai = {"error": {"message": message, "type": "server_error", "param": None, "code": STREAM_CUT}}
    return b"data: " + json.dumps(openai).encode() + b"\n\n"


_CUT_ENDS = tuple(cut_event(path, "").rsplit(b",", 1)[1] for path in ("/v1/completions", "/v1/responses", MESSAGES))
CUT_TAIL = 1024  # how much of a stream's end cut_event and ends_with_cut read (a Responses event's number)


def ends_with_cut(tail: bytes) -> bool:
    """Whether a stream's last bytes are the error event of a stream that was cut (a door's, for
    the lab router, which then writes no second one), in any API's format."""
    return tail.endswith(_CUT_ENDS)


# -- bodies -----------------------------------------------------------------------------------------


class BodyError(ValueError):
    """A body the door cannot route: no model in it, or not the format its path takes."""


class Form:
    """A multipart/form-data body kept as its parts came, the `model` field's value readable and
    replaceable. The boundary never occurs inside a part (RFC 2046), so splitting on it is exact."""

    def __init__(self, body: bytes, content_type: str) -> None:
        boundary = _boundary(content_type)
        if boundary is None:
            raise BodyError("A multipart/form-data body with a boundary is required.")
        self.content_type = content_type
        self._delimiter = b"--" + boundary.encode("latin-1")
        self._parts = body.split(self._delimiter)
        if len(self._parts) < 3 or not self._parts[-1].startswith(b"--"):
            raise BodyError("The multipart body does not end with its closing boundary.")
        self._model = self._find("model")

    def _find(self, name: str) -> int | None:
        for index, part in enumerate(self._parts[1:-1], start=1):
            head, sep, _ = part.partition(b"\r\n\r\n")
            if not sep:
                continue
            for line in head.split(b"\r\n"):
                key, _, value = line.decode("latin-1").partition(":")
                if key.strip().lower() == "content-disposition":
                    kind, params = parse_content_disposition(value.strip())
                    if kind == "form-data" and params.get("name") == name:
                        return index
        return None

    def get(self, name: str, default: Any = None) -> Any:
        if name != "model" or self._model is None:
            return default
        _, _, value = self._parts[self._model].partition(b"\r\n\r\n")
        try:
            return value.removesuffix(b"\r\n").decode()
        except UnicodeDecodeError:
            return default

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if not isinstance(value, str):
            raise KeyError(name)
        return value

    def __setitem__(self, name: str, value: str) -> None:
        if name != "model" or self._model is None:
            raise KeyError(name)
        head, sep, _ = self._parts[self._model].partition(b"\r\n\r\n")
        self._parts[self._model] = head + sep + value.encode() + b"\r\n"

    def copy(self) -> Form:
        twin = object.__new__(Form)
        twin.__dict__.update(self.__dict__, _parts=list(self._parts))
        return twin

    def encode(self) -> bytes:
        return self._delimiter.join(self._parts)


def _boundary(content_type: str) -> str | None:
    kind = parse_mimetype(content_type)
    if (kind.type, kind.subtype) != ("multipart", "form-data"):
        return None
    boundary = kind.parameters.get("boundary")
    return boundary if boundary and len(boundary) <= 70 else None


def encode_body(payload: dict[str, Any] | Form) -> tuple[bytes, str]:
    """The body to send on and its Content-Type."""
    if isinstance(payload, Form):
        return payload.encode(), payload.content_type
    return json.dumps(payload).encode(), "application/json"

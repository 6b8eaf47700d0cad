"""The switches of a request body that decide what the front door meters (`stream`, and
`stream_options.include_usage` where an API has it), read the way the engines behind it read them,
and forwarded as real JSON booleans, so the door and the engine never disagree about whether an answer streams.

vLLM's and SGLang's request models are pydantic models with `stream: bool`: pydantic's lax mode
turns "true", "1", 1, "yes", "on" (and more) into True. A door that only took the JSON `true` as a
stream passed such a body on as it was, the engine streamed, and the door read the stream as one
answer with no usage: the request was booked at zero tokens. So the door reads every value
pydantic accepts as pydantic does (pydantic-core `src/input/shared.rs`, `str_as_bool` and
`int_as_bool`; a float counts when it is a whole 0 or 1) and refuses anything else with 400,
which is also what vLLM and SGLang answer to it. llama.cpp (and Ollama) refuse a `stream` that
is no JSON boolean; the value the door forwards is always `true` or `false`, which every engine
reads alike.
"""

from __future__ import annotations

from typing import Any

from .apis import api_of

__all__ = ["FlagError", "lax_bool", "normalise_flags"]

# pydantic-core's str_as_bool: "0"/"1" exactly, the words case-insensitively (ASCII), no trimming
TRUE_WORDS = frozenset({"1", "t", "y", "on", "yes", "true"})
FALSE_WORDS = frozenset({"0", "f", "n", "no", "off", "false"})


class FlagError(ValueError):
    """A switch no engine reads as true or false; `param` names it (OpenAI's error field)."""

    def __init__(self, param: str, value: object) -> None:
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:40] + "…"
        super().__init__(f"`{param}` must be true or false, not {shown}.")
        self.param = param


def lax_bool(value: object, param: str) -> bool:
    """`value` as pydantic's lax mode reads a bool; FlagError when it reads none."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.lower() if value.isascii() else ""  # str.lower() maps some non-ASCII to ASCII
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise FlagError(param, value)


def normalise_flags(payload: dict[str, Any], endpoint: str) -> None:
    """Rewrite `payload`'s `stream` (for the APIs that stream: chat, completions, Responses,
    Anthropic's Messages) and `stream_options.include_usage` (chat, completions) as JSON booleans;
    a null `stream` is false, as it is to every engine. Raises
    FlagError, leaving the caller to refuse the request, when one is no boolean in any reading."""
    api = api_of(endpoint)
    if api is None or not api.streams:
        return
    if "stream" in payload:
        stream = payload["stream"]
        payload["stream"] = False if stream is None else lax_bool(stream, "stream")
    if not api.usage_option:
        return
    options = payload.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is not None:
        include = lax_bool(options["include_usage"], "stream_options.include_usage")
        payload["stream_options"] = {**options, "include_usage": include}

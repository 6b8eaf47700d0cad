"""The chat playground on a revision's page: try the model a host serves without curl.

The browser talks only to the panel. `playground_chat` sends the conversation to the engine's
OpenAI `/v1/chat/completions` (`stream: true`; for a model recorded for completions, a base model
(serving.purpose), the conversation's text to `/v1/completions` for it to continue) at the engine
itself (`Host.address` and the revision's port: deployments.services.exports.revision_client_target;
the client exports go through the host's front door instead), with the engine's API key from the
host's secrets, which never reaches the page, and turns the engine's stream into the page's own
Server-Sent Events:

    event: start  data: {"model": "gemma"}
    event: delta  data: {"content": "Hel", "reasoning": ""}
    event: done   data: {"ttft_ms": 180.2, "tokens": 42, "prompt_tokens": 17, "tokens_per_s": 31.5, ...}
    event: error  data: {"message": "..."}

Only the revision the host serves now can be tried (`playground_state` says why not, otherwise).
Refusals raise before anything is sent; once the stream has begun, timeouts and engine errors
end it with an `error` event, never an exception. Closing the generator (the browser went
away or pressed Stop: the WSGI server closes the response) closes the engine's request, and
the engine stops generating. Each chat is audited (`revision.chat`), without its text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
from django.core.exceptions import ValidationError
from django.db import transaction

from controlpanel.roles import OPERATOR, ensure_role
from core.audit import audit_record
from deployments.models import DeploymentRevision, Secret, active_revision_id_of
from deployments.selectors.hosts import serving_status
from hardware.selectors import offline_reason
from serving.benchmarking.stats import StreamTimer, tpot
from serving.exports import ClientTarget
from serving.purpose import COMPLETIONS

from .exports import revision_client_target
from .secrets import secret_reveal

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

FALLBACK_MAX_TOKENS = 512  # when the served context is unknown (exports.default_max_output has none)
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 120.0  # between two chunks: a long prompt on a CPU host takes its time
MAX_ANSWER_S = 900.0  # one answer never holds a web thread longer than this
ERROR_BODY_BYTES = 4096


class PlaygroundUnavailable(Exception):
    """This revision cannot be tried now; the message says why (shown in the box)."""


@dataclass(frozen=True)
class PlaygroundDefaults:
    """What the form starts with: the revision's sampling as its client exports write it."""

    temperature: float | None
    top_p: float | None
    max_tokens: int
    max_tokens_limit: int | None  # what one request may use (the served context per sequence)
    extra: dict[str, float] = field(default_factory=dict)  # the preset's other values, sent as they are
    source: str = ""  # where the values come from, in words


@dataclass(frozen=True)
class Playground:
    available: bool
    reason: str = ""  # why not, when it is not
    defaults: PlaygroundDefaults | None = None


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat: the page's history (user and assistant turns, the last one the user's)."""

    messages: list[dict[str, str]]
    system: str = ""
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None


def unavailable_reason(revision: DeploymentRevision) -> str:
    """Why `revision` cannot be tried now; "" when the host serves it and its engine is healthy."""
    host = revision.host
    label = f"r{revision.number}"
    offline = offline_reason(host)
    if offline:
        return offline
    active_id = active_revision_id_of(host)
    if active_id != revision.pk:
        if active_id is None:
            return f"{host.name} serves nothing yet: switch it to {label} to try {label} here."
        active = host.deployment.active_revision
        return f"{host.name} serves r{active.number}, not {label}: switch to {label} to try it here."
    status = serving_status(host)
    if not status.serving:
        return f"Not serving now: {status.note}"
    return ""


def playground_defaults(revision: DeploymentRevision, target: ClientTarget | None = None) -> PlaygroundDefaults:
    """The sampling the revision's exports write (the catalog's preset for how the server runs the
    model, serving.exports.sampling_preset) and its reply budget; `target`: the revision's client
    target when the caller has it already."""
    target = target or revision_client_target(revision)
    sampling = dict(target.sampling)
    temperature = sampling.pop("temperature", None)
    top_p = sampling.pop("top_p", None)
    model = revision.model_variant.name
    if target.sampling_preset:
        source = f"the catalog's {target.sampling_preset!r} sampling preset for {model}"
    else:
        source = f"no sampling preset for {model} in the catalog: empty fields leave them to the engine"
    return PlaygroundDefaults(
        temperature=temperature,
        top_p=top_p,
        max_tokens=target.max_output or FALLBACK_MAX_TOKENS,
        max_tokens_limit=target.context_tokens,
        extra=sampling,
        source=source,
    )


def playground_state(revision: DeploymentRevision, *, with_defaults: bool = True) -> Playground:
    reason = unavailable_reason(revision)
    if reason:
        return Playground(False, reason)
    return Playground(True, defaults=playground_defaults(revision) if with_defaults else None)


def _api_key(revision: DeploymentRevision) -> str | None:
    if not revision.api_key_secret:
        return None
    try:
        return secret_reveal(host=revision.host, name=revision.api_key_secret)
    except Secret.DoesNotExist as exc:
        raise PlaygroundUnavailable(
            f"{revision.host.name} has no secret named {revision.api_key_secret!r}, the engine's API key: "
            "an admin sets it on the host's Secrets page."
        ) from exc
    except ValidationError as exc:
        raise PlaygroundUnavailable("; ".join(exc.messages)) from exc


def _body(chat: ChatRequest, *, model: str, defaults: PlaygroundDefaults, completion: bool) -> dict[str, Any]:
    """The engine's request: the chat's messages, or for a completions model (`completion`) their
    text, one paragraph a turn, for the model to continue."""
    messages = ([{"role": "system", "content": chat.system}] if chat.system.strip() else []) + chat.messages
    asked: dict[str, Any] = (
        {"prompt": "\n\n".join(m["content"] for m in messages)} if completion else {"messages": messages}
    )
    body: dict[str, Any] = {
        "model": model,
        **asked,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": chat.max_tokens or defaults.max_tokens,
        **{k: int(v) if k == "top_k" else v for k, v in defaults.extra.items()},
    }
    if chat.temperature is not None:
        body["temperature"] = chat.temperature
    if chat.top_p is not None:
        body["top_p"] = chat.top_p
    return body


def playground_chat(*, revision: DeploymentRevision, chat: ChatRequest, actor: AbstractUser | None) -> Iterator[bytes]:
    """Check, audit and open one chat with the revision's engine; the stream of the page's events.

    Raises PermissionDenied (not an operator), PlaygroundUnavailable (the host does not serve the
    revision now, or its API key is missing) or ValidationError (a reply longer than the context)."""
    ensure_role(actor, OPERATOR)
    reason = unavailable_reason(revision)
    if reason:
        raise PlaygroundUnavailable(reason)
    target = revision_client_target(revision)
    defaults = playground_defaults(revision, target)
    limit = defaults.max_tokens_limit
    if chat.max_tokens is not None and limit is not None and chat.max_tokens > limit:
        raise ValidationError(
            {"max_tokens": f"At most {limit:,} tokens: that is all the context one request gets on this server."}
        )
    headers = {"Accept": "text/event-stream"}
    key = _api_key(revision)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    completion = revision.model_variant.purpose == COMPLETIONS
    body = _body(chat, model=target.served_name, defaults=defaults, completion=completion)
    with transaction.atomic():
        audit_record(
            action="revision.chat",
            summary=f"chat with r{revision.number} on {revision.host.name} ({len(chat.messages)} message(s))",
            obj=revision,
            host=revision.host,
            data={k: body.get(k) for k in ("max_tokens", "temperature", "top_p")} | {"messages": len(chat.messages)},
            actor=actor,
        )
    path = "/completions" if completion else "/chat/completions"
    return relay(target.base_url + path, body=body, headers=headers)


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _engine_refusal(response: httpx.Response) -> str:
    """The engine's own words for a refused request (OpenAI's {"error": {"message"}} or its text)."""
    raw = b""
    for part in response.iter_bytes():
        raw += part
        if len(raw) >= ERROR_BODY_BYTES:
            break
    text = raw[:ERROR_BODY_BYTES].decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error", data)
        message = error.get("message") if isinstance(error, dict) else error
        text = str(message or text)
    return f"The engine refused the request (HTTP {response.status_code}): {text[:500] or 'no reason given'}"


def _chunk_error(chunk: dict[str, Any]) -> str:
    error = chunk.get("error")
    message = error.get("message") if isinstance(error, dict) else error
    return f"The engine stopped with an error: {str(message)[:500]}"


def _summary(timer: StreamTimer, finish_reason: str | None, *, stopped: str = "") -> dict[str, Any]:
    tokens = timer.output_tokens
    per_token = tpot(timer.e2e, timer.ttft, tokens)
    return {
        "ttft_ms": round(timer.ttft * 1000, 1) if timer.ttft is not None else None,
        "tokens": tokens,
        "prompt_tokens": timer.prompt_tokens,
        "tokens_per_s": round(1 / per_token, 1) if per_token else None,
        "elapsed_ms": round((time.perf_counter() - timer.start) * 1000, 1),
        "finish_reason": finish_reason or stopped or None,
    }


def relay(url: str, *, body: dict[str, Any], headers: dict[str, str]) -> Iterator[bytes]:
    """Stream one chat (or completion) from the engine at `url` as the page's events (module docstring)."""
    yield _event("start", {"model": body.get("model")})
    timer = StreamTimer(start=time.perf_counter())
    finish: str | None = None
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    try:
        with (
            httpx.Client(timeout=timeout) as client,
            client.stream("POST", url, json=body, headers=headers) as response,
        ):
            if response.status_code != 200:
                yield _event("error", {"message": _engine_refusal(response)})
                return
            for line in response.iter_lines():
                if time.perf_counter() - timer.start > MAX_ANSWER_S:
                    yield _event("done", _summary(timer, None, stopped=f"stopped after {MAX_ANSWER_S:g} s"))
                    return
                if not line.startswith("data:"):
                    continue  # blank separators, comments, event: lines
                payload = line[5:].strip()
                if payload == "[DONE]":
                    break
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    continue
                if not isinstance(chunk, dict):
                    continue
                if "error" in chunk:
                    yield _event("error", {"message": _chunk_error(chunk)})
                    return
                timer.feed(chunk, time.perf_counter())
                choices = chunk.get("choices") or []
                choice = choices[0] if choices and isinstance(choices[0], dict) else {}
                finish = choice.get("finish_reason") or finish
                raw = choice.get("delta")
                delta: dict[str, Any] = raw if isinstance(raw, dict) else {}
                content = delta.get("content") or choice.get("text") or ""  # a chat's delta, a completion's text
                reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
                if content or reasoning:
                    yield _event("delta", {"content": str(content), "reasoning": str(reasoning)})
    except httpx.TimeoutException as exc:
        waited = CONNECT_TIMEOUT_S if isinstance(exc, httpx.ConnectTimeout) else READ_TIMEOUT_S
        yield _event("error", {"message": f"The engine at {url} did not answer within {waited:g} s."})
        return
    except httpx.HTTPError as exc:
        yield _event("error", {"message": f"The panel could not reach the engine at {url}: {exc}"})
        return
    yield _event("done", _summary(timer, finish))

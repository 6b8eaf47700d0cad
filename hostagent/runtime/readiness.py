"""Is the engine ready? Fine-grained polling instead of the seed's 10-second Ansible loop.

Ready means: the health URL answers 200, then /v1/models lists the served name. The
process is watched while we wait, so a bad model path fails in about a second with the
engine's own last log lines as the reason, instead of at the timeout. `verify_answer` is
the separate last step: a chat model must answer one short chat (noise fails it), a completions
model (base) continue one short prompt.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.secrets_mask import mask_text
from serving.engine_log_lines import cause_line
from serving.engines.base import LaunchSpec
from serving.purpose import COMPLETIONS

from .errors import EngineExitedError, EngineNotReadyError, EngineVerifyError
from .local_http import engine_client

ProgressCallback = Callable[[str, float, str], None]
"""on_progress(stage, fraction 0..1, message): stages "health", "models", "verify"."""

LogTail = Callable[[], list[str]]
# Lines of a failed start's log shown with its error; the tail it is handed may be longer, for the
# cause: a Python engine's worker logs its exception a hundred lines and more above the wrappers
# that end the log (vLLM: "Engine core initialization failed. See root cause above.").
SHOWN_TAIL_LINES = 40

POLL_INTERVAL = 0.05  # a probe on loopback costs the engine next to nothing; a coarser poll costs the switch
REPORT_EVERY = 1.0  # seconds between progress reports while nothing changes (each is a line in the log)
PROBE_TIMEOUT = httpx.Timeout(2.0, connect=0.5)


@dataclass(frozen=True)
class ReadyResult:
    seconds: float  # from the call until ready
    health_seconds: float  # until the health URL first answered 200
    models: list[str] = field(default_factory=list)  # ids /v1/models listed
    polls: int = 0


@dataclass(frozen=True)
class ChatCheck:
    """The health gate's test request and its answer (`verify_answer`): a chat, or a completion for a
    completions model."""

    seconds: float
    text: str  # what the model answered (content, or reasoning content), for display
    completion_tokens: int | None
    model: str | None
    what: str = "test chat completion"  # or "test completion"


def api_key_from_spec(spec: LaunchSpec) -> str | None:
    """The API key the engine will demand, read from its argv or env (never logged)."""
    argv = list(spec.argv)
    for i, arg in enumerate(argv):
        if arg == "--api-key" and i + 1 < len(argv):
            return argv[i + 1].split(",")[0]
        if arg.startswith("--api-key="):
            return arg.split("=", 1)[1].split(",")[0]
    for name in ("VLLM_API_KEY", "LLAMA_API_KEY", "SGLANG_API_KEY"):
        if spec.env.get(name):
            return spec.env[name].split(",")[0]
    return None


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The engine's key as a request header (none without a key)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@contextmanager
def _client(client: httpx.Client | None, timeout: httpx.Timeout | float) -> Iterator[httpx.Client]:
    if client is not None:
        yield client
        return
    with engine_client(timeout) as own:
        yield own


def wait_ready(
    spec: LaunchSpec,
    *,
    timeout: float = 600.0,
    process_alive: Callable[[], bool] | None = None,
    on_progress: ProgressCallback | None = None,
    log_tail: LogTail | None = None,
    client: httpx.Client | None = None,
    poll_interval: float = POLL_INTERVAL,
    api_key: str | None = None,
) -> ReadyResult:
    """Poll until health is 200 and /v1/models lists `spec.served_name`.

    Raises EngineExitedError as soon as `process_alive()` turns False, EngineNotReadyError
    at the timeout (or at once on 401/403 from /v1/models); both carry the log tail.
    """
    api_key = api_key if api_key is not None else api_key_from_spec(spec)
    secrets = spec.secret_values
    started = time.monotonic()
    deadline = started + timeout
    tail = log_tail or (lambda: [])
    health_seconds: float | None = None
    last = "no answer yet"
    polls = 0
    reported: tuple[str, float] = ("", 0.0)  # what was last reported (stage and answer) and when

    def progress(stage: str, message: str, answer: str = "") -> None:
        """Report a new stage or answer at once, the same one again at most every REPORT_EVERY s."""
        nonlocal reported
        now = time.monotonic()
        key = f"{stage}\n{answer}"
        if on_progress is None or (key == reported[0] and now - reported[1] < REPORT_EVERY):
            return
        reported = (key, now)
        elapsed = now - started
        on_progress(stage, min(elapsed / timeout, 0.99) if timeout > 0 else 0.0, message)

    with _client(client, PROBE_TIMEOUT) as http:
        while True:
            polls += 1
            elapsed = time.monotonic() - started
            if process_alive is not None and not process_alive():
                lines = tail()
                said = cause_line(lines)  # the engine's own reason, quoted wherever the failure is reported
                raise EngineExitedError(
                    f"the engine process exited {elapsed:.1f} s after the start, before it was "
                    f"ready{f': {said}' if said else ''} (last probe: {last})",
                    lines[-SHOWN_TAIL_LINES:],
                )
            if health_seconds is None:
                last = _probe_health(http, spec)
                if last == "200":
                    health_seconds = time.monotonic() - started
                    progress("models", f"health OK after {health_seconds:.1f} s; checking /v1/models", "health OK")
                    continue
                progress("health", f"waiting for {spec.health_url}: {last} ({elapsed:.1f} s)", last)
            else:
                ids, status = _probe_models(http, spec, api_key)
                if spec.served_name in ids or (not spec.served_name and ids):
                    seconds = time.monotonic() - started
                    progress("models", f"ready after {seconds:.1f} s, serving {', '.join(ids)}", "ready")
                    return ReadyResult(seconds, health_seconds, ids, polls)
                last = status
                if status.startswith(("401", "403")):
                    raise EngineNotReadyError(
                        f"{spec.models_url} refused us ({status}): the API key is missing or wrong",
                        tail()[-SHOWN_TAIL_LINES:],
                    )
                progress("models", f"waiting for {spec.served_name!r} in /v1/models: {status}", status)
            if time.monotonic() >= deadline:
                reason = (
                    f"the engine was not ready after {timeout:.0f} s (last probe: {last})"
                    if health_seconds is None
                    else f"health was OK but /v1/models did not list {spec.served_name!r} "
                    f"within {timeout:.0f} s (last answer: {last})"
                )
                raise EngineNotReadyError(mask_text(reason, secrets), tail()[-SHOWN_TAIL_LINES:])
            time.sleep(poll_interval)


def _probe_health(http: httpx.Client, spec: LaunchSpec) -> str:
    try:
        response = http.get(spec.health_url, timeout=PROBE_TIMEOUT)
    except httpx.ConnectError:
        return "connection refused"
    except httpx.TimeoutException:
        return "timed out"
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}"
    if response.status_code == 200:
        return "200"
    return f"{response.status_code} {_short(response.text)}"


def _probe_models(http: httpx.Client, spec: LaunchSpec, api_key: str | None) -> tuple[list[str], str]:
    try:
        response = http.get(spec.models_url, headers=auth_headers(api_key), timeout=PROBE_TIMEOUT)
    except httpx.HTTPError as exc:
        return [], type(exc).__name__
    if response.status_code != 200:
        return [], f"{response.status_code} {_short(response.text)}"
    try:
        data = response.json().get("data") or []
    except (ValueError, AttributeError):
        return [], "200 but not JSON"
    ids = [str(m.get("id")) for m in data if isinstance(m, dict)]
    return ids, f"200, lists {ids}"


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# Chat-format markers a model prints as text when the prompt came in a format it was not trained on
# (a GGUF without tokenizer.chat_template gets llama.cpp's ChatML). A model that knows the format ends
# its turn with such a marker as a special token, which the engine never puts in the answer's text.
TEMPLATE_MARKERS = (
    "<|im_start|>",
    "<|im_end|>",
    "<start_of_turn>",
    "<end_of_turn>",
    "[INST]",
    "[/INST]",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|user|>",
    "<|assistant|>",
    "<|system|>",
)
VERIFY_TOKENS = 16  # measured: Gemma 270M without its template answered "Say hello in one word.<|im_end|>\n<|im_"


def echoed_marker(text: str) -> str | None:
    """The chat-format marker the answer prints as text, or the start of one it was cut inside."""
    for marker in TEMPLATE_MARKERS:
        if marker in text:
            return marker
    stripped = text.rstrip()
    for marker in TEMPLATE_MARKERS:
        if any(stripped.endswith(marker[:cut]) for cut in range(3, len(marker))):
            return marker
    return None


def repeats_question(prompt: str, text: str) -> bool:
    """Whether the answer begins with the question it was asked: a base model (not instruction-tuned)
    continues the text it is given, so under its own chat format it writes the user's line again
    (Gemma 3 270M: "Say hello in one word. mendatang\nSay hello in one word."). An instruction-tuned
    model answers instead."""
    question = " ".join(prompt.split()).casefold()
    return bool(question) and " ".join(text.split()).casefold().startswith(question)


def noise_reason(prompt: str, text: str) -> str | None:
    """Why a chat model's answer to the test chat is noise every client would get, or None for an answer.

    Chat-format markers printed as text: the model does not know the format the engine sent. The
    question written back: the model continues text instead of answering, as a base model does."""
    marker = echoed_marker(text)
    if marker is not None:
        return (
            f"the test chat answer echoes the chat format's markers ({marker}): the model does not know the format "
            f"the engine sent, and would answer every chat with text like {_short(text, 120)!r}. A GGUF without a "
            "chat template (tokenizer.chat_template) gets llama.cpp's ChatML: give the revision chat_template (one "
            "of llama.cpp's built-in templates) or chat_template_file, or use a GGUF that carries its template"
        )
    if repeats_question(prompt, text):
        return (
            f"the test chat was answered with the question itself ({_short(text, 80)!r}): the model continues text "
            "instead of answering, as a base model (not instruction-tuned) does, so every chat would get noise. "
            "Serve the model's instruction-tuned variant (-it, -Instruct, -Chat), or, to serve this one on purpose "
            "for completions, mark it as a completions model (base) in the model catalog"
        )
    return None


def _test_request(
    spec: LaunchSpec,
    url: str,
    payload: dict[str, Any],
    *,
    what: str,
    client: httpx.Client | None,
    timeout: float,
    api_key: str | None,
    tail: LogTail,
) -> tuple[float, dict[str, Any], Any]:
    """POST the test request; its seconds, JSON body and first choice, or EngineVerifyError (an error, a refusal,
    an answer without a choice)."""
    api_key = api_key if api_key is not None else api_key_from_spec(spec)
    started = time.monotonic()
    with _client(client, httpx.Timeout(timeout, connect=2.0)) as http:
        try:
            response = http.post(url, json=payload, headers=auth_headers(api_key), timeout=timeout)
        except httpx.HTTPError as exc:
            raise EngineVerifyError(
                f"the {what} failed: {type(exc).__name__}: {exc}", tail()[-SHOWN_TAIL_LINES:]
            ) from exc
    seconds = time.monotonic() - started
    if response.status_code != 200:
        reason = f"the {what} answered {response.status_code}: {_short(response.text, 300)}"
        raise EngineVerifyError(mask_text(reason, spec.secret_values), tail()[-SHOWN_TAIL_LINES:])
    try:
        body = response.json()
        choice = body["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise EngineVerifyError(
            f"the {what} answered 200 without a choice: {_short(response.text, 300)}", tail()[-SHOWN_TAIL_LINES:]
        ) from exc
    return seconds, body, choice


def _answer_text(choice: Any, *, completion: bool) -> str | None:
    """A choice's text (a completion's `text`; a chat message's content, or its reasoning content),
    None when the choice has no such part."""
    if not isinstance(choice, dict):
        return None
    if completion:
        text = choice.get("text")
    else:
        message = choice.get("message")
        if not isinstance(message, dict):
            return None
        text = message.get("content") or message.get("reasoning_content") or ""
    return None if text is None else text if isinstance(text, str) else str(text)


def verify_answer(
    spec: LaunchSpec,
    *,
    client: httpx.Client | None = None,
    # Enough tokens for a model that does not know the chat format to show it (see TEMPLATE_MARKERS);
    # each is a decode step on the switch's clock (milliseconds for a small model).
    max_tokens: int = VERIFY_TOKENS,
    timeout: float = 60.0,
    prompt: str = "Say hello in one word.",
    api_key: str | None = None,
    log_tail: LogTail | None = None,
) -> ChatCheck:
    """The health gate's last step, for what the model is for (`spec.purpose`, serving.purpose): a chat
    model answers one short chat completion at `spec.chat_url`, and an answer that is noise (chat-format
    markers, the question written back: `noise_reason`) fails it; a completions model (base) continues one
    short prompt at `spec.completions_url`. EngineVerifyError with the reason when it fails."""
    tail = log_tail or (lambda: [])
    completion = spec.purpose == COMPLETIONS  # chat, and anything unknown: the strict gate
    what = "test completion" if completion else "test chat completion"
    asked: dict[str, Any] = {"prompt": prompt} if completion else {"messages": [{"role": "user", "content": prompt}]}
    payload = {"model": spec.served_name, **asked, "max_tokens": max_tokens, "temperature": 0, "stream": False}
    url = spec.completions_url if completion else spec.chat_url
    seconds, body, choice = _test_request(
        spec, url, payload, what=what, client=client, timeout=timeout, api_key=api_key, tail=tail
    )
    text = _answer_text(choice, completion=completion)
    if text is None:
        reason = f"the {what} answered 200 without an answer in its choice: {_short(str(choice), 300)}"
        raise EngineVerifyError(mask_text(reason, spec.secret_values), tail()[-SHOWN_TAIL_LINES:])
    noise = None if completion else noise_reason(prompt, text)
    if noise is not None:
        raise EngineVerifyError(mask_text(noise, spec.secret_values), tail()[-SHOWN_TAIL_LINES:])
    usage = body.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    model = body.get("model")
    return ChatCheck(
        seconds, text, usage.get("completion_tokens"), model if isinstance(model, str) else None, what=what
    )

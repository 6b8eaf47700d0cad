"""The benchmark load generator: async, streaming, on the GPU host. No ORM, no Django.

`run_benchmark(target, profile, ...)` measures a running OpenAI-compatible server the way
`vllm bench serve` does (maths in `serving.benchmarking.stats`) and returns a
`RunResult`. It reports its own CPU time so a run can tell when the client, not the engine,
was the bottleneck.

The timed requests go through aiohttp, as `vllm bench serve` sends them: an engine writes
one chunk per token, and httpx spent about 180 us of CPU per chunk (its connection pool looks
at every connection on each event) against aiohttp's 26 us (bench/bench_loadgen.py). The
untimed preparation (context, tokenizer probes) uses httpx.

Callbacks (`progress`, `cancel`) run off the event loop, so a slow one (a database write,
a broker round trip) never delays the timestamps of streamed chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import aiohttp
import httpx

from hostagent.runtime.energy import EnergyMeter, NullMeter
from hostagent.runtime.local_http import engine_client
from serving.benchmarking import stats
from serving.benchmarking.profiles import BenchmarkProfile
from serving.benchmarking.results import RequestRecord, RunResult, build_level
from serving.benchmarking.workload import (
    CountTokens,
    LinearTokenModel,
    Prompt,
    fit_prompt,
    passage_words,
    poisson_offsets,
)

Progress = Callable[[int, int, str, str], None]  # (done, total, level label, message)
CancelCheck = Callable[[], bool] | threading.Event | asyncio.Event
ParseMetrics = Callable[[str], Mapping[str, float]]

CHAT_PATH = "/v1/chat/completions"
JSON_HEADERS = {"Content-Type": "application/json"}
SESSION_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=10.0)  # each request has its own deadline
DEATH_ERRORS = 3  # consecutive connection failures that mean the engine is gone (no health URL)


@dataclass(frozen=True)
class Target:
    chat_url: str
    model: str
    health_url: str | None = None
    metrics_url: str | None = None
    api_key: str | None = None

    @property
    def base_url(self) -> str:
        url = self.chat_url.rstrip("/")
        return url[: -len(CHAT_PATH)] if url.endswith(CHAT_PATH) else url.rsplit("/v1/", 1)[0]

    @classmethod
    def from_launch_spec(cls, spec: Any, *, api_key: str | None = None) -> Target:
        """From a `serving.engines.base.LaunchSpec`."""
        return cls(
            chat_url=spec.chat_url,
            model=spec.served_name,
            health_url=spec.health_url,
            metrics_url=spec.metrics_url,
            api_key=api_key,
        )


@dataclass
class _RunState:
    total: int
    done: int = 0
    # The level running now: its number (1-based) of how many, its size, and `done` when it began,
    # so progress reads per level ("concurrency 4 (level 2 of 3): 5/32"), not the whole run's count.
    level: int = 0
    levels: int = 0
    level_size: int = 0
    level_began: int = 0
    status: str | None = None  # set when the run must stop: "cancelled" | "engine_died"
    reason: str = ""
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    consecutive_errors: int = 0

    def halt(self, status: str, reason: str) -> None:
        if self.status is None:
            self.status, self.reason = status, reason
        self.stop.set()


@dataclass
class _Attempt:
    """One try at a request; `reused` is set by aiohttp's tracing when the pool lent a kept-alive
    connection, `stale` when that connection failed before the server answered."""

    timer: stats.StreamTimer
    error: str | None = None
    trouble: bool = False
    reused: bool = False
    stale: bool = False


async def _on_reuse(session: Any, ctx: SimpleNamespace, params: Any) -> None:
    if isinstance(ctx.trace_request_ctx, _Attempt):
        ctx.trace_request_ctx.reused = True


def _reuse_trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(_on_reuse)
    return trace


def request_body(model: str, prompt: str, output_tokens: int, *, stream: bool = True) -> dict[str, Any]:
    """A chat request asking for exactly `output_tokens` tokens (ignore_eos + min_tokens)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": output_tokens,
        "max_completion_tokens": output_tokens,
        "min_tokens": output_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


class LoadGenerator:
    def __init__(
        self,
        target: Target,
        profile: BenchmarkProfile,
        *,
        progress: Progress | None = None,
        cancel: CancelCheck | None = None,
        meter: EnergyMeter | None = None,
        parse_metrics: ParseMetrics = stats.parse_prometheus_samples,
        served_context: int | None = None,
        use_tokenize: bool = True,
    ) -> None:
        self.target = target
        self.profile = profile
        self.progress = progress
        self.cancel = cancel
        self.meter: EnergyMeter = meter or NullMeter()
        self.parse_metrics = parse_metrics
        self.served_context = served_context
        self.use_tokenize = use_tokenize
        self._callbacks = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-progress")
        headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
        self._headers = headers

    # -- preparation (synchronous, before anything is timed) ----------------------------

    def _sync_client(self) -> httpx.Client:
        client = engine_client(httpx.Timeout(self.profile.timeout_s, connect=10.0))
        client.headers.update(self._headers)
        return client

    def discover_context(self, client: httpx.Client) -> int | None:
        """Served context per request: llama.cpp /props (per-slot n_ctx), else vLLM's
        /v1/models max_model_len."""
        base = self.target.base_url
        try:
            resp = client.get(f"{base}/props")
            if resp.status_code == 200:
                n_ctx = resp.json().get("default_generation_settings", {}).get("n_ctx")
                if n_ctx:
                    return int(n_ctx)
        except (httpx.HTTPError, ValueError):
            pass
        try:
            resp = client.get(f"{base}/v1/models")
            for card in resp.json().get("data", []):
                if card.get("max_model_len"):
                    return int(card["max_model_len"])
        except (httpx.HTTPError, ValueError, AttributeError):
            pass
        return None

    def _probe_prompt_tokens(self, client: httpx.Client, text: str) -> int:
        resp = client.post(self.target.chat_url, json=request_body(self.target.model, text, 1, stream=False))
        resp.raise_for_status()
        return int(resp.json()["usage"]["prompt_tokens"])

    def token_counter(self, client: httpx.Client) -> tuple[CountTokens, int, str]:
        """(count, overhead, how): the served tokenizer over /tokenize when the engine has
        one, the chat template's overhead measured with one usage probe; else a linear model
        calibrated from two usage probes."""
        probe = " ".join(passage_words(-1, self.profile.seed, 40))
        url = f"{self.target.base_url}/tokenize"
        # llama.cpp's /tokenize reads `content`; vLLM's (and SGLang's) `prompt` with the model's
        # name, refusing a body without it. Both answer {"tokens": [...]}. The first shape the
        # engine takes is the one used for every prompt.
        shapes = [
            lambda text: {"content": text, "add_special": False},
            lambda text: {"model": self.target.model, "prompt": text, "add_special_tokens": False},
        ]

        def tokenize(text: str) -> int:
            resp = client.post(url, json=shapes[0](text))
            resp.raise_for_status()
            return len(resp.json()["tokens"])

        while self.use_tokenize and shapes:
            try:
                probe_tokens = tokenize(probe)
            except (httpx.HTTPError, ValueError, KeyError):
                shapes.pop(0)
            else:
                overhead = self._probe_prompt_tokens(client, probe) - probe_tokens
                return tokenize, max(0, overhead), "tokenize"
        # The long probe fills about half the served context, sized from the short one's count: an
        # English vocabulary spends about 1.3 tokens a word, a byte-level one several (a fixed length
        # made for 1.3 was longer than a small slot, and the engine refused it).
        short = self._probe_prompt_tokens(client, probe)
        per_word = max(1.3, short / 40)
        context = self.served_context or 4096
        words = max(50, min(400, int(context / 2 / per_word)))
        if words * per_word > 0.9 * context:
            raise ValueError(
                f"a served context of {context} tokens is too small to measure prompt sizes without the "
                f"engine's tokenizer ({short} tokens for 40 words): serve a larger context per sequence"
            )
        long_probe = " ".join(passage_words(-1, self.profile.seed, words))
        model = LinearTokenModel.from_probes(40, short, words, self._probe_prompt_tokens(client, long_probe))
        return model, 0, "usage-calibrated"

    def prepare(self) -> tuple[BenchmarkProfile, list[Prompt], str]:
        with self._sync_client() as client:
            if self.served_context is None:
                self.served_context = self.discover_context(client)
            profile = self.profile.resolve(self.served_context)
            count, overhead, how = self.token_counter(client)
            target, seed = profile.input_tokens, profile.seed
            run = secrets.token_hex(3)  # in every opening: nothing of an earlier run is in the engine's cache
            if how == "tokenize":
                # Text tokenised inside the chat template can merge differently at its edges
                # than alone; check one real prompt against the server's usage and correct.
                first = fit_prompt(target, count, index=0, seed=seed, overhead=overhead, run=run)
                seen = self._probe_prompt_tokens(client, first.text)
                overhead = max(0, overhead + seen - first.tokens)
            n = profile.warmup_requests + profile.total_requests
            prompts = [fit_prompt(target, count, index=i, seed=seed, overhead=overhead, run=run) for i in range(n)]
        return profile, prompts, how

    # -- callbacks, off the loop ----------------------------------------------------------

    def _report(self, state: _RunState, label: str, message: str) -> None:
        """The run's count (done of total) and the level's own, in its label."""
        if label and state.level_size:
            where = f"level {state.level} of {state.levels}" if state.levels > 1 else "one level"
            label = f"{label} ({where}): {state.done - state.level_began}/{state.level_size}"
        if self.progress is not None:
            self._callbacks.submit(self._safe, self.progress, state.done, state.total, label, message)

    @staticmethod
    def _safe(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:  # a broken progress hook must not end the run
            return None

    async def _is_cancelled(self) -> bool:
        cancel = self.cancel
        if cancel is None:
            return False
        if isinstance(cancel, threading.Event | asyncio.Event):
            return cancel.is_set()
        return bool(await asyncio.get_running_loop().run_in_executor(self._callbacks, self._safe, cancel))

    async def _watch_cancel(self, state: _RunState) -> None:
        while not state.stop.is_set():
            if await self._is_cancelled():
                state.halt("cancelled", "cancelled by the user")
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.stop.wait(), timeout=0.1)

    # -- engine health ----------------------------------------------------------------------

    async def _healthy(self, client: aiohttp.ClientSession) -> tuple[bool, str]:
        if not self.target.health_url:
            return True, ""
        try:
            async with client.get(self.target.health_url, timeout=aiohttp.ClientTimeout(total=5.0)) as resp:
                await resp.read()
                return resp.status == 200, f"health {resp.status}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            return False, f"{type(exc).__name__}: {exc}"

    async def _on_engine_error(self, client: aiohttp.ClientSession, state: _RunState, error: str) -> None:
        state.consecutive_errors += 1
        if self.target.health_url:
            for attempt in range(2):
                ok, why = await self._healthy(client)
                if ok:
                    return
                if attempt == 0:
                    await asyncio.sleep(0.5)
            state.halt("engine_died", f"engine stopped answering ({error}); health check failed: {why}")
        elif state.consecutive_errors >= DEATH_ERRORS:
            state.halt("engine_died", f"{state.consecutive_errors} requests in a row failed to connect: {error}")

    # -- one request --------------------------------------------------------------------------

    async def _attempt(self, client: aiohttp.ClientSession, payload: bytes) -> _Attempt:
        """Send one streamed request and read it to the end, timed from just before sending."""
        attempt = _Attempt(timer=stats.StreamTimer(start=time.perf_counter()))
        answered = False
        try:
            async with asyncio.timeout(self.profile.timeout_s):
                async with client.post(
                    self.target.chat_url, data=payload, headers=JSON_HEADERS, trace_request_ctx=attempt
                ) as resp:
                    answered = True
                    if resp.status != 200:
                        text = (await resp.read()).decode(errors="replace")[:300]
                        attempt.error = f"HTTP {resp.status}: {text}"
                        attempt.trouble = resp.status >= 500
                    else:
                        attempt.error = await _read_sse(resp, attempt.timer)
        except TimeoutError:
            attempt.error, attempt.trouble = f"timed out after {self.profile.timeout_s} s", True
        except aiohttp.ClientError as exc:
            attempt.error = f"{type(exc).__name__}: {exc or 'connection closed'}"
            attempt.trouble = isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError)
            attempt.stale = attempt.reused and not answered and _stale_socket(exc)
        except json.JSONDecodeError as exc:
            attempt.error = f"bad stream chunk: {exc}"
        return attempt

    async def _one(
        self, client: aiohttp.ClientSession, prompt: Prompt, output_tokens: int, level_start: float
    ) -> tuple[RequestRecord, bool]:
        """One streamed request -> (record, engine_trouble): trouble = a connection failure,
        a 5xx or a timeout, after which the engine's health is checked.

        A pooled connection the server had already closed fails before any byte comes back
        (the server's keep-alive and the client's reuse crossed): nothing was processed, so
        the request is sent again once, on a connection of its own, and timed from then.
        """
        payload = json.dumps(request_body(self.target.model, prompt.text, output_tokens)).encode()
        attempt = await self._attempt(client, payload)
        retried = attempt.stale
        if retried:
            connector = aiohttp.TCPConnector(force_close=True)
            async with aiohttp.ClientSession(
                headers=self._headers, connector=connector, timeout=SESSION_TIMEOUT
            ) as fresh:
                attempt = await self._attempt(fresh, payload)
        timer, error = attempt.timer, attempt.error
        if error is None and not timer.ok:
            error = "no output chunk received"
        ms = 1000.0
        record = RequestRecord(
            start_ms=(timer.start - level_start) * ms,
            ok=error is None and timer.ok,
            ttft_ms=None if timer.ttft is None else timer.ttft * ms,
            e2e_ms=None if timer.e2e is None else timer.e2e * ms,
            itl_ms=[gap * ms for gap in timer.itl],
            input_tokens=timer.prompt_tokens,
            output_tokens=timer.output_tokens if timer.ok else None,
            output_chunks=timer.output_chunks,
            error=error,
            server_timings=timer.server_timings,
            retried=retried,
        )
        return record, attempt.trouble

    async def _run_request(
        self,
        client: aiohttp.ClientSession,
        state: _RunState,
        prompt: Prompt,
        label: str,
        level_start: float,
        records: list[RequestRecord],
    ) -> None:
        record, trouble = await self._one(client, prompt, self.profile.output_tokens, level_start)
        records.append(record)
        state.done += 1
        if record.ok:
            state.consecutive_errors = 0
            msg = f"{record.output_tokens} tokens, TTFT {record.ttft_ms:.0f} ms, E2E {record.e2e_ms:.0f} ms"
        else:
            msg = f"failed: {record.error}"
        self._report(state, label, msg)
        if trouble:
            await self._on_engine_error(client, state, record.error or "")

    # -- one level ---------------------------------------------------------------------------

    async def _run_level(
        self,
        client: aiohttp.ClientSession,
        state: _RunState,
        prompts: list[Prompt],
        *,
        label: str,
        concurrency: int | None,
        rate: float | None,
    ) -> tuple[list[RequestRecord], int, float]:
        records: list[RequestRecord] = []
        tasks: set[asyncio.Task[None]] = set()
        level_start = time.perf_counter()
        gate = asyncio.Semaphore(concurrency or self.profile.max_concurrency or len(prompts))

        async def gated(prompt: Prompt) -> None:
            async with gate:
                if state.stop.is_set():
                    return
                await self._run_request(client, state, prompt, label, level_start, records)

        offsets = poisson_offsets(rate, len(prompts), self.profile.seed) if rate else [0.0] * len(prompts)
        for prompt, offset in zip(prompts, offsets, strict=True):
            delay = level_start + offset - time.perf_counter()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(state.stop.wait(), timeout=delay)
            if state.stop.is_set():
                break
            task = asyncio.create_task(gated(prompt))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await asyncio.sleep(0)  # let it take the gate in order

        pending: set[asyncio.Task[Any]] = set(tasks)
        stopper: asyncio.Task[Any] = asyncio.create_task(state.stop.wait())
        while pending:
            done, pending = await asyncio.wait(pending | {stopper}, return_when=asyncio.FIRST_COMPLETED)
            pending.discard(stopper)
            if stopper in done:
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                break
        stopper.cancel()
        duration = time.perf_counter() - level_start
        cancelled = len(prompts) - len(records)
        return records, cancelled, duration

    # -- the run -----------------------------------------------------------------------------

    async def _scrape(self, client: aiohttp.ClientSession) -> dict[str, float] | None:
        if not self.target.metrics_url:
            return None
        try:
            async with client.get(self.target.metrics_url, timeout=aiohttp.ClientTimeout(total=10.0)) as resp:
                resp.raise_for_status()
                return dict(self.parse_metrics(await resp.text(errors="replace")))
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None

    async def run(self) -> RunResult:
        base: dict[str, Any] = {"model": self.target.model, "url": self.target.chat_url}
        try:
            profile, prompts, _how = await asyncio.to_thread(self.prepare)
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            status = "engine_died" if isinstance(exc, httpx.TransportError) else "failed"
            return RunResult(
                profile=self.profile.to_dict(), status=status, reason=f"preparing the workload: {exc}", **base
            )
        self.profile = profile
        result = RunResult(profile=profile.to_dict(), status="completed", served_context=self.served_context, **base)
        state = _RunState(total=profile.total_requests)
        if profile.request_rate is not None:
            concurrency = profile.max_concurrency or profile.num_requests
        else:
            concurrency = max(profile.concurrency)
        # Idle connections expire before the server's own keep-alive timeout (llama.cpp's
        # cpp-httplib: 5 s), so a request rarely lands on a socket the server just closed;
        # when one does, `_one` sends it again on a fresh connection.
        connector = aiohttp.TCPConnector(limit=concurrency + 4, keepalive_timeout=2.0)
        timeout = SESSION_TIMEOUT
        try:
            async with aiohttp.ClientSession(
                headers=self._headers, connector=connector, timeout=timeout, trace_configs=[_reuse_trace()]
            ) as client:
                await self._measure(client, state, profile, prompts, result)
        finally:
            self._callbacks.shutdown(wait=True)
        return result

    async def _measure(
        self,
        client: aiohttp.ClientSession,
        state: _RunState,
        profile: BenchmarkProfile,
        prompts: list[Prompt],
        result: RunResult,
    ) -> None:
        ok, why = await self._healthy(client)
        if not ok:
            result.status, result.reason = "engine_died", f"engine not healthy before the run: {why}"
            return
        warm, prompts = prompts[: profile.warmup_requests], prompts[profile.warmup_requests :]
        for prompt in warm:
            record, _ = await self._one(client, prompt, min(profile.output_tokens, 16), time.perf_counter())
            if not record.ok:
                result.status, result.reason = "failed", f"warm-up request failed: {record.error}"
                return
        before = await self._scrape(client)
        watcher = asyncio.create_task(self._watch_cancel(state))
        self.meter.start()
        cpu0, t0 = time.process_time(), time.perf_counter()
        labels = profile.level_labels()
        if profile.request_rate is not None:
            levels: list[tuple[str, int | None, float | None]] = [
                (labels[0], profile.max_concurrency, profile.request_rate)
            ]
        else:
            levels = [(label, c, None) for label, c in zip(labels, profile.concurrency, strict=True)]
        n = profile.num_requests
        try:
            for i, (label, conc, rate) in enumerate(levels):
                if state.stop.is_set():
                    break
                state.level, state.levels, state.level_size, state.level_began = i + 1, len(levels), n, state.done
                self._report(state, label, f"starting {label}")
                records, cancelled, duration = await self._run_level(
                    client, state, prompts[i * n : (i + 1) * n], label=label, concurrency=conc, rate=rate
                )
                result.levels.append(
                    build_level(
                        records,
                        label=label,
                        duration_s=duration,
                        requested=n,
                        concurrency=conc if rate is None else profile.max_concurrency,
                        rate=rate,
                        cancelled=cancelled,
                        slos=profile.slos,
                    )
                )
        finally:
            cpu = time.process_time() - cpu0
            result.duration_s = time.perf_counter() - t0
            reading = self.meter.stop()
            state.stop.set()
            await watcher
        result.set_client_cpu(cpu)
        result.set_energy(reading.energy_j, reading.avg_power_w, reading.source)
        if state.status is not None:
            result.status, result.reason = state.status, state.reason
        elif all(level.completed == 0 for level in result.levels):
            result.status, result.reason = "failed", "no request succeeded"
        after = await self._scrape(client) if result.status != "engine_died" else None
        if before is not None and after is not None:
            result.engine_metrics_delta = stats.metrics_delta(before, after)
            result.spec_acceptance_rate = stats.spec_acceptance_rate(result.engine_metrics_delta)
        self._report(state, "", f"run {result.status}" + (f": {result.reason}" if result.reason else ""))


def _stale_socket(exc: aiohttp.ClientError) -> bool:
    """The connection was closed under the request (disconnected or reset), not refused."""
    return isinstance(exc, aiohttp.ServerDisconnectedError) or (
        isinstance(exc, aiohttp.ClientOSError) and not isinstance(exc, aiohttp.ClientConnectorError)
    )


async def _read_sse(resp: aiohttp.ClientResponse, timer: stats.StreamTimer) -> str | None:
    """Feed every `data:` event to `timer` with its arrival time; an error event -> message.

    Splits raw bytes itself (cheaper than a text and line decoder); events that arrive in
    one read share that read's timestamp, which is when the client saw them.
    """
    buf = b""
    async for data in resp.content.iter_any():
        now = time.perf_counter()
        buf += data
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if not line.startswith(b"data:"):
                continue  # blank separators, ':' comments, event: lines
            payload = line[5:].strip()
            if payload == b"[DONE]":
                continue  # read on to the end so the connection is reused
            chunk = json.loads(payload)
            if "error" in chunk:
                return f"stream error: {json.dumps(chunk['error'])[:300]}"
            timer.feed(chunk, now)
    return None


async def run_benchmark(target: Target, profile: BenchmarkProfile, **kwargs: Any) -> RunResult:
    """Run `profile` against `target`; keyword arguments as for `LoadGenerator`."""
    return await LoadGenerator(target, profile, **kwargs).run()


def run_benchmark_sync(target: Target, profile: BenchmarkProfile, **kwargs: Any) -> RunResult:
    """For a Celery task or a script: runs its own event loop."""
    return asyncio.run(run_benchmark(target, profile, **kwargs))

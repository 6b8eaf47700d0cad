"""The front door's HTTP side: OpenAI routes, keys, usage, metrics; and `serve()`, its one entry point.

POST /v1/chat/completions, /v1/completions, /v1/embeddings,   routed by the body's `model` (a form
     /v1/responses, /v1/responses/input_tokens, /v1/rerank,    field on /v1/audio/transcriptions),
     /v1/audio/transcriptions, /v1/messages,                   to an engine that serves the path
     /v1/messages/count_tokens                                 (apis.py; Anthropic's errors there)
GET  /v1/models                                              the names and aliases a key may use, each model's state
GET  /metrics                                                Prometheus text: the door's, then its loaded engines'
GET  /health                                                 {"status": "ok"} while it listens
GET  /frontdoor/state, /frontdoor/usage                      for this host: loopback, or the address the door listens on
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web

from .apis import BodyError, api_of
from .departed import Departed, not_found_message
from .engine_metrics import EngineScraper
from .flags import FlagError, normalise_flags
from .keys import NO_KEY_MESSAGE, InferenceKey, KeyTable
from .metrics import Metrics
from .proxy import CLIENT_GONE, Answer, EngineGone, Upstream, error_response
from .scheduler import FreeMemory, Loader, Refused, Scheduler
from .server import bearer_only, listen, read_body, read_body_of
from .settings import FrontDoorSettings
from .table import RoutingTable
from .usage import OPEN_KEY, UsageLedger, UsageRow, tokens_of

__all__ = ["FrontDoor", "serve"]

LOOPBACK = frozenset({"127.0.0.1", "::1"})
_KEY = web.AppKey("door", object)


class FrontDoor:
    """One host's front door. `start()` listens, `stop()` closes; `update_table()` and
    `update_keys()` take effect for the next request; `usage()` and `state()` are for the agent."""

    def __init__(
        self,
        table: RoutingTable,
        loader: Loader,
        free_memory: FreeMemory,
        settings: FrontDoorSettings | None = None,
        *,
        keys: KeyTable | None = None,
    ) -> None:
        self.settings = settings or FrontDoorSettings.from_env(os.environ)
        self.metrics = Metrics()
        self.engines = EngineScraper(self.metrics, self.settings.host_label)
        self.ledger = UsageLedger()
        self.keys = keys or KeyTable()
        self.scheduler = Scheduler(table, loader, free_memory, self.settings, self.metrics)
        self.departed = Departed()  # names the table no longer serves -> what serves in their place
        self.started_at = int(time.time())
        self._runner: web.AppRunner | None = None
        self._upstream: Upstream | None = None
        self.port = self.settings.port

    # -- life ------------------------------------------------------------------------------

    async def start(self) -> None:
        self._upstream = Upstream()
        self.engines.open()
        self._runner, self.port = await listen(
            self.settings.host, self.settings.port, inference=self._inference, not_found=self._not_found,
            gets={
                "/v1/models": self._models, "/metrics": bearer_only(self._metrics, self.settings.metrics_token),
                "/health": self._health, "/frontdoor/state": self._state, "/frontdoor/usage": self._usage,
            },
            limits=self.settings.limits, metrics=self.metrics,
        )  # fmt: skip
        self.scheduler.start()

    async def stop(self) -> None:
        """Stop listening, let the requests being answered finish (aiohttp gives them up to a
        minute), then stop loading."""
        if self._runner is not None:
            await self._runner.cleanup()
        await self.scheduler.close()
        if self._upstream is not None:
            await self._upstream.close()
        await self.engines.close()

    def update_table(self, table: RoutingTable) -> None:
        self.departed.update(self.scheduler.table, table)
        self.scheduler.update_table(table)

    def update_keys(self, keys: KeyTable) -> None:
        self.keys = keys

    def update_limits(self, **limits: float) -> None:
        """New queue and drain bounds (`queue_max`, `queue_wait_s`, `drain_timeout_s`), from the
        next request and the next unload on."""
        if "queue_max" in limits:
            limits["queue_max"] = int(limits["queue_max"])
        self.settings = dataclasses.replace(self.settings, **limits)  # type: ignore[arg-type]
        self.scheduler.settings = self.settings

    def usage(self) -> list[UsageRow]:
        """Totals per day, key and model: requests, prompt and completion tokens, errors."""
        return self.ledger.rows()

    def state(self) -> list[dict[str, Any]]:
        """Per served model: mode, phase (loaded, loading, ...), requests in flight and waiting."""
        return self.scheduler.state()

    # -- routes ---------------------------------------------------------------------------------

    def _authenticate(self, request: web.Request) -> InferenceKey | None | web.Response:
        if self.keys.open:
            return None
        key = self.keys.find(request.headers)
        if key is None:
            self.metrics.requests.labels("", "", "", request.path, "401").inc()
            return error_response(401, NO_KEY_MESSAGE, code="invalid_api_key")
        return key

    async def _inference(self, request: web.Request) -> web.StreamResponse:
        endpoint = request.path
        key = self._authenticate(request)
        if isinstance(key, web.Response):
            return key
        key_name = key.name if key is not None else OPEN_KEY
        try:
            payload = read_body_of(api_of(endpoint), await read_body(request), request.headers.get("Content-Type", ""))
        except BodyError as bad:
            self.metrics.requests.labels("", "", key_name, endpoint, "400").inc()
            return error_response(400, str(bad), code="invalid_body")
        try:
            if isinstance(payload, dict):
                normalise_flags(payload, endpoint)  # `stream` as the engine reads it, so the door meters it
        except FlagError as bad:
            self.metrics.requests.labels("", "", key_name, endpoint, "400").inc()
            return error_response(400, str(bad), code="invalid_value", param=bad.param)
        label = payload["model"]
        model = self.scheduler.resolve(label)
        if model is None:
            self.metrics.requests.labels("", "", key_name, endpoint, "404").inc()
            allows = key.allows if key is not None else None
            message = not_found_message(label, self.scheduler.table, self.departed, allows)
            return error_response(404, message, code="model_not_found")
        if key is not None and not key.allows(label, model.name):
            self._account(key_name, model.name, label, endpoint, Answer(status=403))
            return error_response(
                403, f"The key `{key.name}` may not use `{label}`.", code="model_not_allowed", kind="permission_error"
            )
        if not model.serves(endpoint):
            self._account(key_name, model.name, label, endpoint, Answer(status=404))
            return error_response(
                404, f"`{label}` is served by {model.engine or 'an engine'}, which does not serve {endpoint}.",
                code="api_not_served",
            )  # fmt: skip
        # Per-key limits count an inference key, or on an open door each client address.
        holder = f"the key `{key.name}`" if key is not None else f"the client {request.remote or 'unknown'}"
        for attempt in range(2):
            try:
                lease = await self.scheduler.acquire(label, holder=holder)
            except asyncio.CancelledError:  # the client hung up while its model loaded
                self._account(key_name, model.name, label, endpoint, Answer(status=CLIENT_GONE))
                raise
            except Refused as refused:
                self._account(key_name, model.name, label, endpoint, Answer(status=refused.status))
                return error_response(
                    refused.status,
                    refused.message,
                    code=refused.code,
                    kind=refused.kind,
                    retry_after=refused.retry_after,
                    details=refused.details,
                )
            assert self._upstream is not None
            try:
                return await self._upstream.forward(
                    request,
                    lease,
                    payload.copy(),
                    endpoint,
                    functools.partial(self._account, key_name, lease.model.name, label, endpoint),
                    gone_ok=attempt == 0,
                )
            except EngineGone:  # nothing reached the engine: it is loaded again, and asked again
                await self.scheduler.lost(lease)
            finally:
                self.scheduler.release(lease)
        raise AssertionError("unreachable: the second attempt answers")

    def _account(self, key: str, model: str, alias: str, endpoint: str, answer: Answer) -> None:
        prompt, completion = tokens_of(answer.usage)
        self.metrics.requests.labels(model, alias, key, endpoint, str(answer.status)).inc()
        if answer.cut:
            self.metrics.streams_cut.labels(model, alias).inc()
        if prompt:
            self.metrics.tokens.labels(model, alias, key, "prompt").inc(prompt)
        if completion:
            self.metrics.tokens.labels(model, alias, key, "completion").inc(completion)
        self.ledger.record(key=key, model=model, prompt_tokens=prompt, completion_tokens=completion, ok=answer.ok)

    async def _models(self, request: web.Request) -> web.Response:
        key = self._authenticate(request)
        if isinstance(key, web.Response):
            return key
        loaded = self.scheduler.loaded()
        data = [
            {
                "id": label,
                "object": "model",
                "created": self.started_at,
                "owned_by": "controlpanel",
                "controlpanel": {
                    "model": model.name,
                    "revision": model.revision or None,
                    "mode": str(model.mode),
                    "loaded": model.name in loaded,
                    "state": progress["phase"],  # loaded, loading, unloaded, draining, unloading
                    "loading_s": progress["loading_s"],  # seconds into the load under way, or null
                    "last_load_s": progress["last_load_s"],
                },
            }
            for model in self.scheduler.table.models
            for progress in (self.scheduler.progress(model.name),)
            for label in (model.name, *model.aliases)
            if key is None or key.allows(label, model.name)
        ]
        return web.json_response({"object": "list", "data": data})

    async def _metrics(self, request: web.Request) -> web.Response:
        """The door's own series, then its loaded engines' (engine_metrics.py): only those loaded
        are asked, so a scrape never loads one."""
        loaded = self.scheduler.loaded()
        models = [model for model in self.scheduler.table.models if model.name in loaded]
        return self.metrics.response(await self.engines.scrape(models))

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    def _this_host(self, request: web.Request) -> bool:
        """A client on this host: loopback, or the address the door listens on (a door on the LAN
        address, CONTROLPANEL_LAN_ADDRESS, is reached from this host at that address)."""
        return request.remote in LOOPBACK or request.remote == self.settings.host

    async def _state(self, request: web.Request) -> web.Response:
        if not self._this_host(request):
            return error_response(403, "Only this host may read the front door's state.", code="loopback_only")
        waiting = sum(row["waiting"] for row in self.state())
        return web.json_response({"models": self.state(), "waiting": waiting})

    async def _usage(self, request: web.Request) -> web.Response:
        if not self._this_host(request):
            return error_response(403, "Only this host may read the front door's usage.", code="loopback_only")
        return web.json_response({"usage": [dataclasses.asdict(row) for row in self.usage()]})

    async def _not_found(self, request: web.Request) -> web.Response:
        return error_response(404, f"No route {request.method} {request.path} on the front door.", code="not_found")


async def serve(
    table: RoutingTable,
    loader: Loader,
    free_memory: FreeMemory,
    settings: FrontDoorSettings | None = None,
    *,
    keys: KeyTable | None = None,
    ready: Callable[[FrontDoor], None] | None = None,
) -> None:
    """Run the host's front door until cancelled. `ready` gets the running FrontDoor (to update
    its tables and read its usage); `settings` default to the environment's."""
    door = FrontDoor(table, loader, free_memory, settings, keys=keys)
    await door.start()
    try:
        if ready is not None:
            ready(door)
        await asyncio.Event().wait()
    finally:
        await door.stop()

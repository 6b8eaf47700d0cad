"""The host's front door: one OpenAI-compatible endpoint for every model the host serves.

It runs on the GPU host beside the agent, routes each request by its `model` (a name or an alias)
to the engine serving it, on every OpenAI and Anthropic path an engine serves (chat, completions,
embeddings, Responses and its input-token count, rerank, audio transcriptions; Anthropic's
Messages and count_tokens), loads on-demand models when a request names them (waiting requests
queue, bounded), counts room in bytes, drains before it unloads, checks inference keys, meters
usage per key, model and day, and exports Prometheus metrics. It imports nothing of Django or the
panel: the agent gives it a routing table, a loader and a free-memory callback.

Why aiohttp: it is the one async HTTP stack the agent already runs (the benchmark load generator
streams through it, at a seventh of httpx's CPU per chunk), it is server and client in one package,
and its StreamResponse.write() waits on the socket's drain, which is the back-pressure a streaming
proxy needs. Starlette on uvicorn with httpx would add a server and a second client for the same.

    table.py      RoutingTable / ServedModel: name, aliases, upstream, engine key, mode, ttl, bytes,
                  the API paths its engine serves
    apis.py       per path: its API (OpenAI, Anthropic), streaming, multipart forms; Anthropic's errors
    keys.py       inference keys (SHA-256 digests) and the models each may use
    settings.py   CONTROLPANEL_FRONT_DOOR_* from the environment
    scheduler.py  loads (side by side, each with a deadline), unloads, the queue, per-key limits,
                  draining, room in bytes (no HTTP)
    flags.py      `stream` and `stream_options.include_usage` read as the engines read them
    proxy.py      one request to an engine: body rewritten, stream passed through, usage read
    usage.py      usage per key, model and day; a stream's usage (chat's chunk, Messages', Responses')
    metrics.py    Prometheus metrics (its Registry is the lab router's too)
    engine_metrics.py  the loaded engines' own /metrics, relabelled onto the door's
    server.py     the routes (apis.py), listen(), body reading and parsing, errors in each API's shape,
                  shared with the lab router
    limits.py     ConnectionLimits: header, body and idle timeouts, connection caps (door and router)
    connections.py  each connection counted, capped per address and in all, cut when its head is late
    app.py        the HTTP routes, FrontDoor, serve() (the agent's entry point)
    launcher.py   a Loader that runs commands, for the bench and `python -m hostagent.frontdoor`

    await serve(table, loader, free_memory, settings, keys=keys, ready=lambda door: ...)
"""

from __future__ import annotations

from .app import FrontDoor, serve
from .keys import InferenceKey, KeyTable, hash_key
from .scheduler import FreeMemory, Loader
from .settings import FrontDoorSettings
from .table import Mode, RoutingTable, ServedModel

__all__ = [
    "FreeMemory",
    "FrontDoor",
    "FrontDoorSettings",
    "InferenceKey",
    "KeyTable",
    "Loader",
    "Mode",
    "RoutingTable",
    "ServedModel",
    "hash_key",
    "serve",
]

"""The lab router's process: `python manage.py router` or `python -m labrouter`.

It reads the panel's settings (CONTROLPANEL_ROUTER_BIND, CONTROLPANEL_ROUTER_REFRESH_S, the
connection bounds and the metrics token; the database the route table comes from), reads the
table in one thread of its own (one database connection, never on the event loop), and stops on
SIGINT or SIGTERM: no new connections, answers in flight finish.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from concurrent.futures import ThreadPoolExecutor

from deployments.services.lab_routes import lab_routes
from hostagent.frontdoor.limits import ConnectionLimits
from serving.binds import split_bind
from serving.lab_routes import LabRoutes

from . import CANNOT_LISTEN
from .app import Router

__all__ = ["CANNOT_LISTEN", "read_routes", "serve_forever"]

log = logging.getLogger("labrouter")


def read_routes() -> LabRoutes:
    """The route table from the database (in the reader's thread; Django is set up)."""
    from django.db import close_old_connections

    close_old_connections()  # a connection past CONN_MAX_AGE, or broken, is replaced
    return lab_routes()


async def _serve(host: str, port: int, refresh_s: float, limits: ConnectionLimits, metrics_token: str) -> None:
    loop = asyncio.get_running_loop()
    reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="router-routes")

    async def read() -> LabRoutes:
        return await loop.run_in_executor(reader, read_routes)

    router = Router(read, host=host, port=port, refresh_s=refresh_s, limits=limits, metrics_token=metrics_token)
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    shown = f"[{host}]" if ":" in host else host
    try:
        await router.start()
    except OSError as exc:
        await router.stop()
        reader.shutdown(wait=False)
        why = exc.strerror or exc
        print(f"router: cannot listen on {shown}:{port} ({why}): set CONTROLPANEL_ROUTER_BIND", flush=True)
        raise SystemExit(CANNOT_LISTEN) from None
    print(f"router listening on {shown}:{router.port} ({len(router.table.doors)} front door(s))", flush=True)
    try:
        await stopping.wait()
    finally:
        await router.stop()
        reader.shutdown(wait=False)


def serve_forever(bind: str | None = None) -> None:
    """Run the router until a signal stops it; `bind` (HOST:PORT) overrides CONTROLPANEL_ROUTER_BIND.
    Raises SystemExit when the router is off or `bind` is not HOST:PORT."""
    from django.conf import settings

    if bind:
        try:
            host, port = split_bind(bind)
        except ValueError:
            raise SystemExit(f"--bind must be HOST:PORT (e.g. 127.0.0.1:4100), not {bind!r}") from None
    elif settings.ROUTER_HOST is None:
        raise SystemExit("the lab router is off (CONTROLPANEL_ROUTER_BIND=off)")
    else:
        host, port = settings.ROUTER_HOST, settings.ROUTER_PORT
    limits = ConnectionLimits(
        header_timeout_s=settings.ROUTER_HEADER_TIMEOUT_S,
        body_timeout_s=settings.ROUTER_BODY_TIMEOUT_S,
        idle_timeout_s=settings.ROUTER_IDLE_TIMEOUT_S,
        max_connections=settings.ROUTER_MAX_CONNECTIONS,
        max_connections_per_peer=settings.ROUTER_MAX_CONNECTIONS_PER_PEER,
    )
    asyncio.run(_serve(host, port, settings.ROUTER_REFRESH_S, limits, settings.ROUTER_METRICS_TOKEN))

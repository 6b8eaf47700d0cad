"""Where a change comes from (web, api, cli, agent, system) and from which address.

Set once per request (controlpanel.middleware.ChangeContextMiddleware) or command; services read
it when they write an audit event (core.audit), so no view or command has to pass it along (the
idea of Nautobot's ChangeContext).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from django.http import HttpRequest


@dataclass(frozen=True)
class ChangeContext:
    source: str = "system"
    remote_addr: str | None = None


_SYSTEM = ChangeContext()
_current: ContextVar[ChangeContext] = ContextVar("change_context", default=_SYSTEM)  # noqa: B039 - frozen


def current_context() -> ChangeContext:
    return _current.get()


@contextlib.contextmanager
def change_context(source: str, remote_addr: str | None = None) -> Iterator[None]:
    token = _current.set(ChangeContext(source=source, remote_addr=remote_addr))
    try:
        yield
    finally:
        _current.reset(token)


API_PATH = "/api/"  # where controlpanel/urls.py mounts the automation API (api/urls.py)


def request_source(request: HttpRequest) -> str:
    """The source of a request: "api" for the automation API (a personal token through /api/), else "web"."""
    return "api" if request.path_info.startswith(API_PATH) else "web"

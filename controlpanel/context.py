"""Where a change comes from (web, api, cli, agent, system) and from which address.

Set once per request or command; services read it when they write an audit event, so
no view or command has to pass it along (the idea of Nautobot's ChangeContext).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from django.http import HttpRequest, HttpResponse

from controlpanel.hardening import client_ip


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


class ChangeContextMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with change_context(request_source(request), client_ip(request)):
            return self.get_response(request)


API_PATH = "/api/"  # where controlpanel/urls.py mounts the automation API (api/urls.py)


def request_source(request: HttpRequest) -> str:
    """The source of a request: "api" for the automation API (a personal token through /api/), else "web"."""
    return "api" if request.path_info.startswith(API_PATH) else "web"

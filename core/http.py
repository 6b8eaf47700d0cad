"""View helpers every app shares: one URL for a GET view and a POST view (each keeps its own method and
role decorators), and whether an htmx request wants a fragment."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed

View = Callable[..., HttpResponse]


def by_method(*, get: View, post: View) -> View:
    @wraps(get)
    def view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method in ("GET", "HEAD"):
            return get(request, *args, **kwargs)
        if request.method == "POST":
            return post(request, *args, **kwargs)
        return HttpResponseNotAllowed(["GET", "POST"])

    return view


def is_partial(request: HttpRequest) -> bool:
    """An htmx request that wants a fragment (boosted requests want the page)."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.boosted

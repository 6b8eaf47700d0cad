"""View helpers every app shares: one URL for a GET view and a POST view (each keeps its own method and
role decorators), whether an htmx request wants a fragment, and a form handed to a service."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django import forms
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed

View = Callable[..., HttpResponse]
T = TypeVar("T")


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


def service_errors_on(form: forms.Form, exc: ValidationError) -> None:
    """A service's ValidationError on the form: beside the field it names, on top otherwise."""
    if hasattr(exc, "error_dict"):
        for key, errors in exc.message_dict.items():
            form.add_error(key if key in form.fields else None, errors)
    else:
        form.add_error(None, exc.messages)


def form_save(form: forms.Form, save: Callable[[dict[str, Any]], T]) -> T | None:
    """What `save(form.cleaned_data)` (a service call) returns once the form is valid and the
    service took it; None when either refused, with the reasons on the form."""
    if not form.is_valid():
        return None
    try:
        return save(form.cleaned_data)
    except ValidationError as exc:
        service_errors_on(form, exc)
        return None

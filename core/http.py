"""View helpers every app shares: one URL for a GET view and a POST view (each keeps its own method and
role decorators), whether an htmx request wants a fragment, a polled fragment that stops its
polling, a form handed to a service, and fragments rendered once per what they show."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping
from functools import wraps
from typing import Any, TypeVar

from django import forms
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import render
from django.template.loader import get_template, render_to_string
from django.utils.safestring import SafeString, mark_safe
from django_htmx.http import HttpResponseStopPolling

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


def polled(request: HttpRequest, template: str, context: Mapping[str, Any], *, going: bool) -> HttpResponse:
    """A fragment the page polls (hx-trigger="every ..."): rendered, and once what it follows has
    ended (`going` False) answered 286 with the same body, which htmx swaps in and then stops
    polling."""
    response = render(request, template, context)
    return response if going else HttpResponseStopPolling(response.content)


def apply_error(form: forms.Form, exc: ValidationError, *, fallback: str | None = None) -> None:
    """A service's ValidationError on the form: beside the field it names; a name the form has
    no field for (a knob's) goes beside `fallback` as "name: message", or on top without one."""
    if not hasattr(exc, "error_dict"):
        form.add_error(None, exc.messages)
        return
    for key, errors in exc.message_dict.items():
        target = key if key in form.fields else fallback
        form.add_error(target, errors if target in (key, None) else [f"{key}: {m}" for m in errors])


def form_save(form: forms.Form, save: Callable[[dict[str, Any]], T], *, fallback: str | None = None) -> T | None:
    """What `save(form.cleaned_data)` (a service call) returns once the form is valid and the
    service took it; None when either refused, with the reasons on the form (`apply_error`)."""
    if not form.is_valid():
        return None
    try:
        return save(form.cleaned_data)
    except ValidationError as exc:
        apply_error(form, exc, fallback=fallback)
        return None


@functools.cache
def template_version(*names: str) -> str:
    """Ten hex digits of these templates' own text: a rendering kept under it is never served
    once a template changed."""
    sources = [get_template(name).template.source for name in names]
    return hashlib.blake2b("\0".join(sources).encode(), digest_size=5).hexdigest()


def cached_render(template: str, key: str, context: Callable[[], Mapping[str, Any]], *, seconds: int) -> SafeString:
    """`template` rendered with `context()` once per `key` (a digest of everything the rendering
    shows) and template text, then read from the cache: `context` is called only to render."""
    cache_key = f"fragment:{template}:{template_version(template)}:{key}"
    html: str | None = cache.get(cache_key)
    if html is None:
        html = render_to_string(template, dict(context()))
        cache.set(cache_key, html, seconds)
    return mark_safe(html)  # noqa: S308 - our own template's output

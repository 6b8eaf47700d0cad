"""The Content-Security-Policy: every page and fragment carries the strict header, no template
needs what the policy refuses (inline scripts, style attributes, event handlers, code that
htmx would evaluate), and the API docs load only the panel's own static files, not a CDN.
tests/browser/test_csp_browser.py shows the pages still work in Chromium under it."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from hardware.models import GpuSample
from tests.test_access import ACCESS, POST_ONLY
from tests.test_access import world as world  # noqa: F401 - the pages' fixture

pytestmark = pytest.mark.django_db

STRICT = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "frame-ancestors": "'none'",
    "form-action": "'self'",
}


def policy(response) -> dict[str, str]:
    header = response.get("Content-Security-Policy", "")
    assert header, f"{response.status_code} {response.get('Content-Type')}: no Content-Security-Policy"
    parts = (part.strip().split(None, 1) for part in header.split(";") if part.strip())
    return {name: (rest[0] if rest else "") for name, *rest in parts}


def assert_strict(response) -> None:
    directives = policy(response)
    for name, value in STRICT.items():
        assert directives.get(name) == value, (name, directives.get(name))
    for name, value in directives.items():
        assert "unsafe-" not in value and "*" not in value, (name, value)
        assert "http:" not in value and "https:" not in value, (name, value)


class Refused(HTMLParser):
    """What a strict policy would block (or that only works with unsafe-inline or unsafe-eval),
    and every URL that is not the panel's own."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []
        self.urls: list[str] = []
        self._in_inline_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "style":
            self.problems.append("<style> element")
        if tag == "script" and not a.get("src") and a.get("type") != "application/json":
            self._in_inline_script = True
        for name, value in attrs:
            value = value or ""
            if name == "style":
                self.problems.append(f'<{tag} style="{value}">')
            elif name.startswith("on") or name.startswith("hx-on"):
                self.problems.append(f"<{tag} {name}>")
            elif name in ("hx-vals", "hx-vars", "hx-headers") and re.match(r"\s*(js|javascript):", value):
                self.problems.append(f'<{tag} {name}="{value}"> (evaluated)')
            elif name == "hx-trigger" and "[" in value:
                self.problems.append(f'<{tag} hx-trigger="{value}"> (a filter is evaluated)')
            elif name in ("src", "href", "action", "formaction", "hx-get", "hx-post", "data"):
                if value.strip().lower().startswith("javascript:"):
                    self.problems.append(f'<{tag} {name}="{value}">')
                self.urls.append(value)

    def handle_data(self, data: str) -> None:
        if self._in_inline_script and data.strip():
            self.problems.append(f"inline <script>: {data.strip()[:60]}")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_inline_script = False


def refused(html: str) -> Refused:
    parser = Refused()
    parser.feed(html)
    return parser


def foreign(urls: list[str]) -> list[str]:
    return [u for u in urls if re.match(r"\s*([a-z][a-z0-9+.-]*:|//)", u, re.I) and not u.startswith("mailto:")]


GET_PAGES = sorted(n for n in ACCESS if n not in POST_ONLY)


def test_every_page_and_fragment_carries_the_strict_policy_and_needs_nothing_it_refuses(
    client: Client, world, admin_user
):
    """Each URL the panel serves to people (tests/test_access.py lists them all), as an admin who
    may read them all, with a GPU whose bars are drawn."""
    GpuSample.objects.create(gpu=world.gpus.get(), ts=timezone.now(), util_pct=37, mem_used_bytes=10 * 1024**3)
    client.force_login(admin_user)
    checked = 0
    for name in GET_PAGES:
        kwargs = ACCESS[name][0]
        response = client.get(reverse(name, kwargs=kwargs))
        assert_strict(response)
        if response.get("Content-Type", "").startswith("text/html"):
            found = refused(response.content.decode())
            assert found.problems == [], (name, found.problems)
            assert foreign(found.urls) == [], (name, foreign(found.urls))
            checked += 1
    assert checked > 40
    # The dashboard's bars are drawn by class, not style attributes.
    cards = client.get(reverse("dashboard:index")).content.decode()
    assert 'class="w37"' in cards
    table = client.get(reverse("dashboard:index") + "?view=table").content.decode()
    assert 'class="w37"' in table


def test_a_bar_past_full_or_below_empty_is_drawn_full_or_empty(client: Client, world, viewer):
    """A host may report more memory used than its GPU has (or garbage): the bar stays in its track."""
    gpu = world.gpus.get()
    GpuSample.objects.create(gpu=gpu, ts=timezone.now(), util_pct=-5, mem_used_bytes=gpu.memory_bytes * 3)
    client.force_login(viewer)
    cards = client.get(reverse("dashboard:index")).content.decode()
    assert 'class="w100"' in cards and 'class="w0"' in cards


def test_pages_outside_the_table_carry_it_too(client: Client, admin_user):
    """Sign-in, a 404 and the API's own answers: the header is on every response, not only pages."""
    for response in (
        client.get("/accounts/login/"),
        client.get("/no-such-page/"),
        client.get("/api/v1/hosts"),
        client.get("/api/v1/openapi.json"),
    ):
        assert_strict(response)
    login = client.get("/accounts/login/").content.decode()
    assert refused(login).problems == []


def test_the_api_docs_load_only_the_panels_own_static_files(client: Client, viewer):
    client.force_login(viewer)
    response = client.get("/api/v1/docs")
    assert response.status_code == 200
    found = refused(response.content.decode())
    assert foreign(found.urls) == [], "the docs page loads from another origin"
    assert found.problems == []
    assert_strict(response)
    assets = [u for u in found.urls if u.endswith((".js", ".css"))]
    assert any("swagger-ui-bundle" in u for u in assets) and any(u.endswith(".css") for u in assets), assets
    for url in assets:
        assert url.startswith(settings.STATIC_URL) or url.startswith("/" + settings.STATIC_URL), url
        assert finders.find(url.split(settings.STATIC_URL, 1)[1]), f"{url} is not among the static files"


TEMPLATE_DIRS = [Path(settings.BASE_DIR) / "templates", *Path(settings.BASE_DIR).glob("*/templates")]
# What the policy refuses, as a template spells it.
IN_SOURCE = {
    "a style attribute": re.compile(r"\sstyle\s*="),
    "a <style> element": re.compile(r"<style[\s>]"),
    "an inline <script>": re.compile(r"<script(?![^>]*\ssrc=)[^>]*>"),
    "an event handler attribute": re.compile(r"\son[a-z]+\s*=", re.I),
    "a javascript: URL": re.compile(r"javascript:", re.I),
    "hx-on (htmx evaluates it)": re.compile(r"\shx-on"),
    "js: values (htmx evaluates them)": re.compile(r"hx-va(?:ls|rs)\s*=\s*['\"]\s*(?:js|javascript):"),
    "an hx-trigger filter (htmx evaluates it)": re.compile(r"hx-trigger\s*=\s*\"[^\"]*\["),
}


def test_no_template_needs_unsafe_inline_or_eval():
    """Every template, including branches the pages above did not render."""
    templates = [p for d in TEMPLATE_DIRS for p in d.rglob("*.html") if "tests" not in p.parts]
    assert len(templates) > 50
    found = [
        f"{path.relative_to(settings.BASE_DIR)}: {what}"
        for path in templates
        for what, pattern in IN_SOURCE.items()
        if pattern.search(path.read_text())
    ]
    assert found == []


def test_htmx_is_told_to_inject_no_style_and_evaluate_nothing(client: Client, viewer):
    client.force_login(viewer)
    page = client.get(reverse("dashboard:index")).content.decode()
    config = re.search(r"<meta name=\"htmx-config\" content='([^']*)'>", page)
    assert config, "no htmx-config meta"
    assert json.loads(config.group(1)) == {"includeIndicatorStyles": False, "allowEval": False}

"""The panel's frame at a common laptop width: at 1280 px an admin, who sees every link, gets the
top bar on one line, and the model catalog's columns keep their figures on one line each."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_top_bar_stays_on_one_line_at_1280_px_and_the_catalog_keeps_its_figures_whole(
    live_server: Any, page: Any, catalog: None, admin_user: User
) -> None:
    User.objects.filter(pk=admin_user.pk).update(is_superuser=True, is_staff=True)  # the most links there are
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", "pw-ada")
    page.click("button[type=submit]")
    page.goto(f"{live_server.url}/models/")
    tops = page.evaluate(
        "[...document.querySelectorAll('header.top a, header.top button, header.top span')]"
        ".map(e => Math.round(e.getBoundingClientRect().top))"
    )
    assert len(tops) > 12 and max(tops) - min(tops) <= 4, tops  # every link on the bar's one line
    assert page.evaluate("document.querySelector('header.top').getBoundingClientRect().height") < 60
    # Each figure cell of the catalog holds its figure on one line (no "27B / 27B" broken in two).
    lines = page.evaluate(
        "[...document.querySelectorAll('table.models td.num')].map(td => { const r = document.createRange();"
        " r.selectNodeContents(td); return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size; })"
    )
    assert lines and set(lines) == {1}, lines

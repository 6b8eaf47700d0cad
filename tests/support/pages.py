"""Parts of the panel's pages that tests read as HTML."""

from __future__ import annotations


def install_form(page: str, engine: str) -> str:
    """The host page's install form for `engine` (its HTML up to </form>): the `install-form` whose
    hidden engine field names it (the Engines list's Read again forms name an engine too)."""
    for chunk in page.split('class="install-form">')[1:]:
        form = chunk.split("</form>", 1)[0]
        if f'name="engine" value="{engine}"' in form:
            return form
    raise AssertionError(f"the page has no install form for {engine}")

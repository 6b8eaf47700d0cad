"""Django's `{# #}` comment ends at the end of its line: one left open is printed as page text (a
multi-line comment once filled the New revision page's left column). Longer notes use
`{% comment %}`."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPEN_COMMENT = re.compile(r"\{#(?!.*#\})")


def template_files() -> list[Path]:
    return sorted(p for p in (ROOT / "templates").rglob("*") if p.is_file() and p.suffix in (".html", ".txt", ".md"))


def unclosed_comments(text: str) -> list[int]:
    """Line numbers where a `{#` has no `#}` after it on the same line."""
    return [n for n, line in enumerate(text.splitlines(), start=1) if OPEN_COMMENT.search(line)]


def test_no_template_has_a_comment_spanning_lines() -> None:
    files = template_files()
    assert len(files) > 20, "no templates found: the check would pass on an empty list"
    found = [f"{p.relative_to(ROOT)}:{n}" for p in files for n in unclosed_comments(p.read_text())]
    assert not found, "a {# #} comment spans lines and would be shown on the page; use {% comment %}:\n" + "\n".join(
        found
    )


def test_the_check_finds_a_multiline_comment() -> None:
    assert unclosed_comments("<p>{# one line #}</p>\n{# starts here\n   ends here #}\n") == [2]


def test_no_template_prints_comment_text(settings) -> None:
    """What Django itself makes of each template: no text node carries a comment opener."""
    from django.template import engines
    from django.template.base import TextNode

    engine = engines["django"].engine
    leaked = []
    for path in template_files():
        if path.suffix != ".html":
            continue
        nodelist = engine.from_string(path.read_text()).nodelist
        for node in nodelist.get_nodes_by_type(TextNode):
            if "{#" in node.s:
                leaked.append(str(path.relative_to(ROOT)))
    assert not leaked, f"templates print comment text: {leaked}"

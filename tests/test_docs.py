"""The README is a short front door and the manual lives in docs/ (issue 25): the README opens
with the two commands a newcomer needs, each a script that exists; it stays short and defines
the words the pages use; and every relative link, anchor and file path in README.md and
docs/*.md points at something that exists (the layout moves; the manual must follow)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MANUAL = ("operators-guide.md", "gpu-hosts.md", "api.md", "configuration.md")

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\n]+)`")
HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.M)


def prose(page: Path) -> str:
    """The page without its fenced code blocks (a `[--json]` in a command is no link)."""
    return FENCE.sub("", page.read_text(encoding="utf-8"))


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in HEADING.findall(prose(page))}


def tracked_top_level() -> set[str]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return {name.split("/", 1)[0] for name in names.decode().split("\0") if "/" in name}


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(prose(page)) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_the_readme_opens_with_the_two_commands_and_both_exist() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0].startswith("# ") and lines[1] == "" and lines[2] == "```bash", "the commands come first"
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    assert commands == ["./scripts/run", "./scripts/test"]
    for command in commands:
        script = ROOT / command
        assert script.is_file() and os.access(script, os.X_OK), f"{command} is not an executable script"


def test_the_readme_is_a_short_front_door() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    glossary = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    for word in ("Host", "Agent", "Revision", "Switch", "Operation", "Deployment"):
        assert f"- **{word}**" in glossary, f"the glossary does not define {word}"
    for page in MANUAL:
        assert f"](docs/{page})" in text, f"the README does not link docs/{page}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_path_named_in_backticks_exists(page: Path) -> None:
    """`serving/engines/envpolicy.py`, `tests/test_layers.py`, `./scripts/run`: a path into the
    repository (its first folder is one git tracks) names a file or folder that is there."""
    top = tracked_top_level()
    missing = []
    for token in CODE.findall(page.read_text(encoding="utf-8")):
        path = token.removeprefix("./")
        if re.search(r"[\s<>{}*|…]", path) or "/" not in path or path.split("/", 1)[0] not in top:
            continue
        if not (ROOT / path).exists():
            missing.append(token)
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: " + ", ".join(missing)


def test_the_link_check_finds_a_broken_link_and_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## Where engines listen\n")
    page.write_text(
        "# P\n\n[ok](other.md#where-engines-listen) [gone](missing.md) [bad](other.md#nowhere)\n"
        "```\n[--json](not-a-link)\n```\n[web](https://example.com)\n"
    )
    assert links(page) == ["other.md#where-engines-listen", "missing.md", "other.md#nowhere"]
    assert "where-engines-listen" in anchors(tmp_path / "other.md") and "nowhere" not in anchors(tmp_path / "other.md")
    assert slug("GPU hosts (the agent)") == "gpu-hosts-the-agent"
    assert slug("HTTPS, proxies and sign-in") == "https-proxies-and-sign-in"


def test_the_architecture_page_names_every_top_level_package() -> None:
    """docs/architecture.md describes each of the code's packages (the ones the layer map ranks):
    a new app, or one moved out of another, has its line there."""
    from tools.code_figures import PACKAGES

    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert [p for p in PACKAGES if f"`{p}/`" not in text] == []

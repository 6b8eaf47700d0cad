"""No tracked file carries an unresolved merge: the README once held conflict markers for 41 commits."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A marker is seven of <, = or > alone at the start of a line (with a label after < and >).
MARKER = re.compile(rb"^(<{7}( .*)?|={7}|>{7}( .*)?)$", re.MULTILINE)


def tracked_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in names.decode().split("\0") if name]


def test_no_tracked_file_has_conflict_markers() -> None:
    files = tracked_files()
    assert files, "git ls-files listed nothing: the check would pass on an empty list"
    found = []
    for path in files:
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_bytes().splitlines(), start=1):
            if MARKER.fullmatch(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line[:40]!r}")
    assert not found, "unresolved merge conflict markers:\n" + "\n".join(found)


def test_the_marker_pattern_finds_a_real_conflict() -> None:
    conflict = b"a\n<<<<<<< HEAD\nb\n=======\nc\n>>>>>>> local\n"
    assert [m.group(0) for m in MARKER.finditer(conflict)] == [b"<<<<<<< HEAD", b"=======", b">>>>>>> local"]


NOT_SHIPPED = {"tests", "tools"}  # the suite and the developers' tools stay in the checkout


def test_pip_install_ships_every_package_of_the_panel() -> None:
    """`pip install .` (the Dockerfile's, a GPU host's agent) installs what pyproject's package list
    finds: an app left out of it (changes, schedules and rollouts once were) is missing from a wheel,
    and the panel does not start from one."""
    import tomllib
    from fnmatch import fnmatchcase

    # setuptools' find: a package is in when one of the include patterns matches its dotted name.
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    top = {path.parent for path in tracked_files() if path.name == "__init__.py" and path.parent.parent == ROOT}
    packages = {folder.name for folder in top} - NOT_SHIPPED
    assert "deployments" in packages and "hostagent" in packages
    left_out = {name for name in packages if not any(fnmatchcase(name, pattern) for pattern in include)}
    assert left_out == set(), "packages pyproject.toml leaves out of the wheel"

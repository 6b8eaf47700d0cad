"""'Warnings and errors only' on each engine's own log lines (tests/fixtures/engine_logs/SOURCES.md):
a line that carries a level is kept for WARNING/ERROR and dropped for INFO, whatever its words say;
a line without one (llama.cpp with --no-log-prefix, tracebacks, stderr prints) is judged by its words."""

from __future__ import annotations

from pathlib import Path

import pytest

from serving.engine_log_lines import problem_flags

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engine_logs"


def kept(name: str) -> list[int]:
    """The 1-based numbers of the lines the filter keeps."""
    lines = (FIXTURES / name).read_text().splitlines()
    return [i for i, flag in enumerate(problem_flags(lines), start=1) if flag]


def levels(name: str, letter_at: int) -> list[int]:
    """llama.cpp's recorded lines: the numbers of those whose level letter (field `letter_at`) is W or E."""
    lines = (FIXTURES / name).read_text().splitlines()
    return [i for i, line in enumerate(lines, start=1) if line.split(" ")[letter_at] in ("W", "E")]


@pytest.mark.parametrize("name", ["llamacpp_missing_model.log", "llamacpp_colors.log"])
def test_llamacpp_lines_with_a_timestamp_are_judged_by_their_level_letter(name: str) -> None:
    expected = [3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15]  # the security warning and every E; no I line
    assert kept(name) == expected
    assert levels("llamacpp_missing_model.log", 1) == expected


def test_llamacpp_serving_keeps_its_warnings_and_not_its_requests() -> None:
    lines = (FIXTURES / "llamacpp_serving.log").read_text().splitlines()
    shown = [lines[i - 1] for i in kept("llamacpp_serving.log")]
    # the three unprefixed "warning: no usable GPU found" lines, then the W lines; no I line
    assert shown[:3] == lines[:3]
    assert [line.split(" ")[1] for line in shown[3:]] == ["W", "W", "W"]
    assert any("got exception" in line for line in shown)


def test_llamacpp_jsonl_uses_its_level_field() -> None:
    assert kept("llamacpp_jsonl.log") == [3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15]


def test_llamacpp_without_prefix_falls_back_on_words() -> None:
    # No level on any line: the failures are kept by their words, the start-up chatter is not.
    assert kept("llamacpp_no_prefix.log") == [5, 6, 7, 8, 9, 10, 11, 12, 13, 15]
    assert kept("llamacpp_bad_argument.log") == [1]


def test_vllm_levels_decide_and_a_traceback_is_kept_whole() -> None:
    # 5 is INFO though it says "failed"; 8 is the process's name before its traceback (9-12).
    assert kept("vllm.log") == [2, 6, 7, 9, 10, 11, 12, 14]


def test_sglang_levels_words_and_traceback() -> None:
    assert kept("sglang.log") == [2, 5, 6, 7, 8, 9]


def test_ollama_levels_decide() -> None:
    # 6 is INFO though it carries `status="llm server error"`.
    assert kept("ollama.log") == [3, 5]


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        ("llamacpp_missing_model.log", "gguf_init_from_file: failed to open GGUF file '/nonexistent.gguf' (No"),
        ("llamacpp_no_prefix.log", "gguf_init_from_file: failed to open GGUF file '/nonexistent.gguf' (No such file"),
        ("llamacpp_bad_argument.log", "error: invalid argument: --bogus-arg"),
        ("vllm.log", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
        # The worker's own exception, not the engine core's "See root cause above" wrappers after it.
        ("vllm_cpu_block_size.log", "ValueError: No common block size for 16 (CPU_ATTN: [MultipleOf(32)])."),
        ("sglang.log", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
    ],
)
def test_a_failed_starts_cause_is_the_engines_own_line(name: str, cause: str) -> None:
    """What a failed switch, rollout wave or restart quotes: the engine's first error (a Python
    engine's last exception), never an INFO line that mentions a failure."""
    from serving.engine_log_lines import cause_line

    said = cause_line((FIXTURES / name).read_text().splitlines())
    assert said is not None and said.startswith(cause), said


def test_a_log_with_no_error_names_no_cause() -> None:
    from serving.engine_log_lines import cause_line

    assert cause_line(["I srv  llama_server: initializing ...", "W srv  security: no API key is set"]) is None


def test_a_real_vllm_cpu_log_is_judged_by_vllms_own_levels() -> None:
    """vllm-cpu 0.32.0's own lines (API server, engine core, worker prefixes): no INFO line is a
    problem, every WARNING and ERROR line is, and so are the Python warnings it prints bare."""
    from serving.engine_log_lines import line_level, problem_flags

    lines = (FIXTURES / "vllm_cpu_block_size.log").read_text().splitlines()
    judged = list(zip(lines, problem_flags(lines), strict=True))
    levels = [line_level(line) for line in lines]
    assert levels.count("INFO") > 20 and levels.count("WARNING") > 5 and levels.count("ERROR") > 20
    assert not any(problem for (_line, problem), level in zip(judged, levels, strict=True) if level == "INFO")
    assert all(problem for (_line, problem), level in zip(judged, levels, strict=True) if level in ("WARNING", "ERROR"))
    assert any(problem for line, problem in judged if "DeprecationWarning" in line)

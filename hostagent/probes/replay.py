"""Record real pynvml calls, and replay them without a GPU.

:class:`RecordingNvml` wraps the real ``pynvml`` module on a GPU host and logs every
``nvml*`` call with its arguments and its raw result or NVML error, JSON-ready
(``tools/record_nvml.py`` writes these logs to ``tests/fixtures/nvml/*.json``).

:class:`ReplayNvml` serves such a log back through the same function names, so the probe in
``hostagent.probes.nvml`` runs unchanged on a machine without a GPU: in tests, and in the
fake-GPU demo mode. Each call returns the recorded answers for its exact arguments in
recorded order, then keeps repeating the last one (or starts over with ``loop=True``).
A call that was never recorded raises :class:`ReplayMiss`, so a probe that asks the
driver something new fails loudly instead of being served made-up data.

No Django, no pynvml import: the replay has its own NVML error classes with pynvml's names.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NotRequired, TypedDict, cast

FORMAT = 1


class CallError(TypedDict):
    name: str  # pynvml's error class without "NVMLError_": "NotSupported", "GpuIsLost", ...
    message: NotRequired[str]


class RecordedCall(TypedDict):
    """One pynvml call as recorded: its function, its arguments and answer (`encode`d), the clock."""

    fn: str
    args: list[Any]
    t: float
    result: NotRequired[Any]
    error: NotRequired[CallError]


class Session(TypedDict):
    calls: list[RecordedCall]
    result: Any  # what the probe made of those calls on the real host (compared by the replay tests)


class FixtureNvml(TypedDict):
    functions: list[str]  # every nvml* function the library had
    constants: dict[str, int]


class Fixture(TypedDict):
    """A recorded fixture file (tools/record_nvml.py)."""

    format: int
    metadata: dict[str, object]
    nvml: FixtureNvml
    sessions: dict[str, Session]


# NVML return codes (nvml.h) and the class-name suffix pynvml derives from each.
ERROR_CODES: dict[str, int] = {
    "Uninitialized": 1,
    "InvalidArgument": 2,
    "NotSupported": 3,
    "NoPermission": 4,
    "AlreadyInitialized": 5,
    "NotFound": 6,
    "InsufficientSize": 7,
    "InsufficientPower": 8,
    "DriverNotLoaded": 9,
    "Timeout": 10,
    "IrqIssue": 11,
    "LibraryNotFound": 12,
    "FunctionNotFound": 13,
    "CorruptedInforom": 14,
    "GpuIsLost": 15,
    "ResetRequired": 16,
    "OperatingSystem": 17,
    "LibRmVersionMismatch": 18,
    "InUse": 19,
    "Memory": 20,
    "NoData": 21,
    "VgpuEccNotSupported": 22,
    "InsufficientResources": 23,
    "FreqNotSupported": 24,
    "ArgumentVersionMismatch": 25,
    "Deprecated": 26,
    "NotReady": 27,
    "GpuNotFound": 28,
    "InvalidState": 29,
    "ResetTypeNotSupported": 30,
    "Unknown": 999,
}


class NVMLError(Exception):  # noqa: N818 - pynvml's name, so `except lib.NVMLError` works on both
    """Replayed NVML error; subclasses are named like pynvml's (``NVMLError_NotSupported``)."""

    def __init__(self, value: int, message: str = "") -> None:
        super().__init__(value, message)
        self.value = value
        self.message = message

    def __str__(self) -> str:
        return self.message or f"NVML error {self.value}"


ERROR_CLASSES: dict[str, type[NVMLError]] = {
    name: type(f"NVMLError_{name}", (NVMLError,), {"__module__": __name__}) for name in ERROR_CODES
}


def make_error(name: str, message: str = "") -> NVMLError:
    """An instance of the replay's ``NVMLError_<name>`` (plain ``NVMLError`` for unknown names)."""
    if name not in ERROR_CLASSES:
        return NVMLError(ERROR_CODES["Unknown"], message or name)
    return ERROR_CLASSES[name](ERROR_CODES[name], message)


class ReplayMiss(LookupError):
    """The probe made a call with arguments the recording never saw."""


@dataclass(frozen=True)
class GpuHandle:
    """A device handle that remembers its index (and, when recording, the real handle)."""

    index: int
    real: Any = field(default=None, compare=False, repr=False)


def encode(value: Any) -> Any:
    """A raw pynvml return value as JSON: structs and objects become field dicts."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, GpuHandle):
        return {"gpu": value.index}
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if hasattr(value, "_fields_"):  # ctypes Structure (pynvml's _PrintableStructure)
        fields = {f[0]: encode(getattr(value, f[0])) for f in value._fields_}
        return {"struct": type(value).__name__, "fields": fields}
    if hasattr(value, "_length_"):  # ctypes array
        return [encode(v) for v in value]
    if hasattr(value, "value") and type(value).__module__ == "ctypes":  # ctypes scalar
        return encode(value.value)
    if hasattr(value, "__dict__"):  # pynvml's nvmlFriendlyObject (process lists)
        return {"object": type(value).__name__, "fields": {k: encode(v) for k, v in vars(value).items()}}
    return {"repr": repr(value)}


def decode(value: Any) -> Any:
    """The inverse of :func:`encode`: structs come back as attribute objects."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "gpu" in value:
        return GpuHandle(value["gpu"])
    if "tuple" in value:
        return tuple(decode(v) for v in value["tuple"])
    if "fields" in value:
        return SimpleNamespace(**{k: decode(v) for k, v in value["fields"].items()})
    return value.get("repr", value)


def encode_args(args: Sequence[Any]) -> list[Any]:
    """Call arguments as JSON. Like ctypes, only handles, ints and strings are accepted."""
    out: list[Any] = []
    for arg in args:
        if isinstance(arg, GpuHandle):
            out.append({"gpu": arg.index})
        elif isinstance(arg, int | str) and not isinstance(arg, bool):
            out.append(arg)
        else:  # e.g. pynvml's NVML_P2P_CAPS_INDEX_READ, which is the tuple (0,)
            raise TypeError(f"NVML argument must be a handle, int or str, not {arg!r}")
    return out


def _key(function: str, encoded_args: list[Any]) -> str:
    return json.dumps([function, encoded_args])


class RecordingNvml:
    """Wraps the real pynvml module and logs each ``nvml*`` call (see :meth:`take`)."""

    def __init__(self, lib: Any, *, clock: Callable[[], float] = time.time) -> None:
        self._lib = lib
        self._clock = clock
        self.calls: list[RecordedCall] = []

    def take(self) -> list[RecordedCall]:
        """The calls logged since the last take."""
        calls, self.calls = self.calls, []
        return calls

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        attr = getattr(self._lib, name)
        if not (name.startswith("nvml") and callable(attr)):
            return attr  # constants and error classes pass through
        return lambda *args: self._call(name, attr, args)

    def _call(self, name: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        entry: RecordedCall = {"fn": name, "args": encode_args(args), "t": round(self._clock(), 4)}
        self.calls.append(entry)
        real_args = [a.real if isinstance(a, GpuHandle) else a for a in args]
        try:
            result = fn(*real_args)
        except self._lib.NVMLError as exc:
            entry["error"] = {"name": type(exc).__name__.removeprefix("NVMLError_"), "message": str(exc)}
            raise
        if name.startswith("nvmlDeviceGetHandleBy"):
            result = GpuHandle(int(args[0]) if name.endswith("ByIndex") else -1, result)
        entry["result"] = encode(result)
        return result


class ReplayNvml:
    """Serves recorded pynvml calls; use it wherever the probe takes ``nvml=``."""

    NVMLError = NVMLError

    def __init__(
        self,
        calls: Iterable[RecordedCall],
        *,
        functions: Iterable[str] = (),
        constants: dict[str, int] | None = None,
        loop: bool = False,
        init_error: str | None = None,
    ) -> None:
        self._answers: dict[str, list[RecordedCall]] = {}
        self._functions = set(functions)
        for call in calls:
            if call["fn"] not in ("nvmlInit", "nvmlShutdown"):
                self._answers.setdefault(_key(call["fn"], call["args"]), []).append(call)
                self._functions.add(call["fn"])
        self._cursor: dict[str, int] = {}
        self._constants = dict(constants or {})
        self._failures: dict[str, str] = {}
        self._loop = loop
        self._init_error = init_error
        self._inits = 0

    @classmethod
    def from_fixture(
        cls,
        fixture: Fixture | str | Path,
        sessions: Sequence[str] | None = None,
        *,
        loop: bool = False,
    ) -> ReplayNvml:
        """Replay the named sessions of a recorded fixture (all of them, in file order, by default)."""
        if not isinstance(fixture, dict):
            fixture = load_fixture(fixture)
        names = list(sessions) if sessions is not None else list(fixture["sessions"])
        calls = [call for name in names for call in fixture["sessions"][name]["calls"]]
        nvml = fixture["nvml"]
        return cls(calls, functions=nvml["functions"], constants=nvml["constants"], loop=loop)

    @classmethod
    def without_driver(cls, error: str = "LibraryNotFound") -> ReplayNvml:
        """A host where ``nvmlInit`` fails: no libnvidia-ml (``LibraryNotFound``) or no driver."""
        return cls([], init_error=error)

    def fail(self, function: str, error: str = "NotSupported") -> None:
        """From now on every call of ``function`` raises ``NVMLError_<error>``."""
        self._failures[function] = error
        self._functions.add(function)

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's name
        if self._init_error is not None:
            raise make_error(self._init_error)
        self._inits += 1

    def nvmlShutdown(self) -> None:  # noqa: N802 - pynvml's name
        if self._inits == 0:
            raise make_error("Uninitialized")
        self._inits -= 1

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name.startswith("NVMLError_") and name.removeprefix("NVMLError_") in ERROR_CLASSES:
            return ERROR_CLASSES[name.removeprefix("NVMLError_")]
        if name in self._constants:
            return self._constants[name]
        if name.startswith("nvml") and name in self._functions:
            return lambda *args: self._serve(name, args)
        raise AttributeError(name)

    def _serve(self, name: str, args: tuple[Any, ...]) -> Any:
        if self._inits == 0:
            raise make_error("Uninitialized")
        if name in self._failures:
            raise make_error(self._failures[name])
        key = _key(name, encode_args(args))
        answers = self._answers.get(key)
        if not answers:
            raise ReplayMiss(f"no recorded answer for {name}{tuple(encode_args(args))}")
        pos = self._cursor.get(key, 0)
        self._cursor[key] = pos + 1
        answer = answers[pos % len(answers) if self._loop else min(pos, len(answers) - 1)]
        if "error" in answer:
            raise make_error(answer["error"]["name"], answer["error"].get("message", ""))
        return decode(answer["result"])


def load_fixture(path: str | Path) -> Fixture:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        raise ValueError(f"{path}: unsupported NVML fixture format {found!r}")
    return cast(Fixture, data)

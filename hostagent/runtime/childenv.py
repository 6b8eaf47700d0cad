"""The environment of every process the agent starts: engines, install steps, version probes.

Built from an allowlist (serving.engines.envpolicy.HOST_INHERITED) over the agent's own
environment, never a copy of it: that environment holds the broker URL and the agent's host
token. A host adds names of its own with CONTROLPANEL_PASS_ENV ("HF_TOKEN,MY_SITE_*"); nothing
named CONTROLPANEL_* is ever handed on, except the engine-owner marker the supervisor sets
(the state folder's path, not a secret: strays.py reads it to tell this panel's engines).

    env = child_env({"PYTHONUNBUFFERED": "1", **step.env})   # an install step
    env = engine_env(spec.env, owner=supervisor.owner)      # an engine
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Mapping

from serving.engines.envpolicy import PANEL_PREFIX, inherited_env, pass_list

from .strays import ENGINE_OWNER_ENV

PASS_ENV = "CONTROLPANEL_PASS_ENV"  # noqa: S105 - a setting's name

__all__ = ["PASS_ENV", "child_env", "engine_env", "forget_variable", "host_pass_list"]


def host_pass_list(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """CONTROLPANEL_PASS_ENV's names; ValueError (naming the entry) when one is not a name."""
    return pass_list((os.environ if environ is None else environ).get(PASS_ENV, ""))


def child_env(extra: Mapping[str, str] | None = None, *, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a process the agent starts sees: the allowlisted part of `environ` (the agent's
    environment by default) and `extra` on top (the step's or the revision's own variables).
    No CONTROLPANEL_* variable, from either."""
    source = os.environ if environ is None else environ
    env = inherited_env(source, also=host_pass_list(source))
    env.update({k: v for k, v in (extra or {}).items() if not k.upper().startswith(PANEL_PREFIX)})
    return env


def engine_env(
    launch_env: Mapping[str, str], *, owner: str, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """An engine's environment: child_env with the revision's validated variables (the launch
    spec's env) and the marker that says which panel's supervisor started it."""
    env = child_env(launch_env, environ=environ)
    env[ENGINE_OWNER_ENV] = owner
    return env


def forget_variable(name: str) -> None:
    """Take `name` out of this process's environment: out of os.environ (so nothing started later
    inherits it) and out of the copy the kernel shows as /proc/<pid>/environ (the environment this
    process was exec'd with, which os.environ changes leave in place), overwritten with zeros."""
    entry = _exec_entry(name)
    os.environ.pop(name, None)  # unsetenv(): the C environment no longer points at it
    if entry is not None:
        address, length = entry
        ctypes.memset(address, 0, length)


def _exec_entry(name: str) -> tuple[int, int] | None:
    """Where the C library keeps `NAME=value` (address, length), or None (not set, not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None)
        libc.getenv.restype = ctypes.c_void_p
        libc.getenv.argtypes = [ctypes.c_char_p]
        value = libc.getenv(name.encode())
        if not value:
            return None
        prefix = name.encode() + b"="
        start = value - len(prefix)
        if ctypes.string_at(start, len(prefix)) == prefix:
            return start, len(prefix) + len(ctypes.string_at(value))
    return None

"""Rollouts across hosts, the pure part: which hosts go in which wave, and what to do next.

A rollout applies one change to a group of hosts in waves: the canary alone first, then batches
of `batch_size`. Each host moves through these states (the panel records them; nothing here
reads a database or a clock):

    pending -> switching -> done                      (the change is in place)
                         -> failed                    (its switch failed; the host's own switch
                                                       rolled it back or never touched it)
    done -> rolling_back -> rolled_back | rollback_failed   (its wave failed: put back)

`next_step` is the whole policy: wait while anything is in flight; after a failure, put back
the hosts of the failed wave that took the change, then stop (earlier waves keep it, later
waves are never touched); otherwise start the next wave unless paused, and finish when every
host is done.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PENDING = "pending"
SWITCHING = "switching"
DONE = "done"
FAILED = "failed"
ROLLING_BACK = "rolling_back"
ROLLED_BACK = "rolled_back"
ROLLBACK_FAILED = "rollback_failed"
HOST_STATES = (PENDING, SWITCHING, DONE, FAILED, ROLLING_BACK, ROLLED_BACK, ROLLBACK_FAILED)
IN_FLIGHT = (SWITCHING, ROLLING_BACK)
MAX_HOSTS = 500
MAX_BATCH = 100

# What the panel does next (Step.action).
WAIT = "wait"  # something is in flight, or the rollout is paused between waves
START = "start"  # apply the change to Step.hosts (the wave Step.wave)
ROLL_BACK = "roll_back"  # put Step.hosts (of the failed wave) back on their previous revision
FINISH = "finish"  # every host took the change
STOP = "stop"  # a wave failed and what could be put back was: the rollout ends failed


class WavePlanError(ValueError):
    """The hosts, canary or batch size cannot make a plan; the message says why."""


@dataclass(frozen=True)
class Step:
    action: str
    wave: int | None = None
    hosts: tuple[str, ...] = ()


def plan_waves(hosts: Sequence[str], *, batch_size: int, canary: str = "") -> list[list[str]]:
    """The waves: the canary alone (default: the first host by name), then the others by name in
    batches of `batch_size`."""
    names = sorted(set(hosts))
    if not names:
        raise WavePlanError("The group has no hosts.")
    if len(names) > MAX_HOSTS:
        raise WavePlanError(f"A rollout covers at most {MAX_HOSTS} hosts, not {len(names)}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= MAX_BATCH:
        raise WavePlanError(f"The batch size is a whole number from 1 to {MAX_BATCH}, not {batch_size!r}.")
    first = canary or names[0]
    if first not in names:
        raise WavePlanError(f"The canary {first!r} is not in the group ({', '.join(names[:10])}).")
    rest = [name for name in names if name != first]
    return [[first]] + [rest[i : i + batch_size] for i in range(0, len(rest), batch_size)]


def next_step(waves: Sequence[Sequence[str]], states: Mapping[str, str], *, paused: bool = False) -> Step:
    """What to do now, given each host's state (`states`, by host name; a host missing counts
    as pending)."""
    state = {name: states.get(name, PENDING) for wave in waves for name in wave}
    if any(s in IN_FLIGHT for s in state.values()):
        return Step(WAIT)
    for index, wave in enumerate(waves):
        if any(state[name] == FAILED for name in wave):
            took = tuple(name for name in wave if state[name] == DONE)
            return Step(ROLL_BACK, index, took) if took else Step(STOP, index)
    for index, wave in enumerate(waves):
        todo = tuple(name for name in wave if state[name] == PENDING)
        if todo:
            return Step(WAIT, index) if paused else Step(START, index, todo)
    return Step(FINISH)


def failed_wave(waves: Sequence[Sequence[str]], states: Mapping[str, str]) -> int | None:
    """The index of the first wave with a failed host, or None."""
    for index, wave in enumerate(waves):
        if any(states.get(name) == FAILED for name in wave):
            return index
    return None

"""What a host serves, from the database, as serving.wire's typed values: the one projection.

- `revision_launch(revision, host_bound=...)`: a revision as its host runs it (`RevisionLaunch`):
  its spec and the host's facts (deployments.runtime_bridge), the planner's memory, the served
  name and context from serving.launch.launch, and (only `host_bound`, for the revision's own
  host) its resolved API key. The agent's order, its launch endpoint and the front door's
  document all get it from here.
- `host_serving(host)`: the host's serving set as its front door gets it (`HostServing`, whose
  `document()` is the `DoorDocument` GET /agent/v1/serving answers): the active revision pinned,
  then the others of the set, each with its launch, aliases and mode; `door_set` leaves out a
  revision that breaks a rule of the set, saying why, so the door never gets a table it refuses.
- `set_rule_breaks(host, members)`: every rule of a serving set (one port per engine, each name
  once and none an alias, the pinned revisions fit the host), which every path that changes the
  set asks first (deployments.services.serving_set); `door_set` keeps the same port and name rule
  (`one_port_one_name`, the one walk both use).

The planner runs once per revision and host facts (deployments.planning's `revision_plan`,
the one entry point, kept by its input, so a poll that changes nothing plans nothing): its
FitReport is the launch's memory, the set's fit and the switch's findings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from django.core.exceptions import ValidationError
from django.utils.text import slugify

from deployments.choices import ServeMode
from deployments.front_door_models import FrontDoor, ModelAlias, ServedRevision
from deployments.models import DeploymentRevision, Secret, active_revision_id_of
from deployments.planning import Plan, planned, revision_memory, revision_plan
from deployments.runtime_bridge import launch_knobs, revision_host_facts, revision_spec
from deployments.services.inference_keys import key_table
from deployments.services.secrets import secret_reveal
from hardware.models import Host
from serving.diffing import fmt
from serving.engines.base import EngineConfigError
from serving.engines.registry import get_adapter
from serving.launch import launch
from serving.launch import served_context as launch_context
from serving.wire import DoorDocument, DoorLimits, DoorModel, RevisionLaunch

__all__ = [
    "HostServing",
    "LeftOut",
    "Plan",
    "Served",
    "door_set",
    "host_capacity",
    "host_serving",
    "model_name",
    "revision_launch",
    "revision_memory",
    "revision_plan",
    "served_name",
    "served_set",
    "set_rule_breaks",
]

# --- one revision -----------------------------------------------------------------------------


def served_name(revision: DeploymentRevision) -> str:
    """What clients send as "model": the revision's name, else the adapter's default for its model."""
    if revision.served_name:
        return str(revision.served_name)
    try:
        return launch(revision_spec(revision), revision_host_facts(revision)).served_name or revision.model_variant.name
    except EngineConfigError:
        return str(revision.model_variant.name)


def revision_launch(revision: DeploymentRevision, *, host_bound: bool, plan_: Plan | None = None) -> RevisionLaunch:
    """`revision` as its host runs it. `host_bound`: the copy for the revision's own host, its API
    key resolved (never for a page). `error` says why the host must refuse to start it: a secret
    it names is not set, or the engine refuses its settings (stored before the rule existed); the
    planner's refusal is the memory's, which a switch refuses and a rollback does not."""
    spec, facts = revision_spec(revision), revision_host_facts(revision)
    api_key, error = None, ""
    if host_bound and revision.api_key_secret:
        try:
            api_key = secret_reveal(host=revision.host, name=revision.api_key_secret)
        except Secret.DoesNotExist:
            error = f"the secret {revision.api_key_secret} is not set on this host"
        except ValidationError as exc:  # made under another key
            error = "; ".join(exc.messages)
    name, context = revision.served_name or "", None
    try:
        made = launch(spec, facts)
        name, context = name or made.served_name, made.served_context
    except EngineConfigError as exc:
        error = error or f"{exc.field + ': ' if exc.field else ''}{exc}"
        try:
            context = launch_context(spec).per_sequence
        except EngineConfigError:
            context = None
    variant = revision.model_variant
    try:
        own_weights = get_adapter(revision.engine).fetches_own_weights
    except EngineConfigError:
        own_weights = True
    copy = facts.local_weights if not own_weights else None
    return RevisionLaunch(
        id=revision.pk,
        number=revision.number,
        spec=spec,
        local_weights=copy,
        # a downloaded folder's size is not the file's: the preflight checks a GGUF file only
        weights_bytes=variant.weights_bytes if not copy or variant.format == "gguf" else None,
        memory=planned(revision, plan_ or revision_plan(revision)),
        served_context=context,
        api_key=api_key,
        error=error,
        served_name=name or variant.name,
    )


# --- the serving set --------------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """One revision of the serving set as the front door gets it."""

    revision: DeploymentRevision
    mode: str
    idle_ttl_s: int | None
    active: bool

    @cached_property
    def name(self) -> str:
        """Its door name, made once (it asks the launch for the engine's default served name)."""
        return model_name(self.revision)


def door_name(number: int, name: str) -> str:
    """The front door's name for a revision: `<served name, slugified>-r<number>`."""
    base = slugify(name.replace("/", "-").replace(".", "-")) or "model"
    return f"{base[:120]}-r{number}"


def model_name(revision: DeploymentRevision) -> str:
    return door_name(revision.number, served_name(revision))


def served_set(host: Host) -> list[Served]:
    """The host's serving set, its active revision first (pinned), then the others by number."""
    active_id = active_revision_id_of(host)
    served: list[Served] = []
    if active_id:
        active = DeploymentRevision.objects.select_related("host", "model_variant").get(pk=active_id)
        served.append(Served(active, str(ServeMode.PINNED), None, True))
    entries = ServedRevision.objects.filter(host=host).select_related("revision__model_variant", "revision__host")
    served += [Served(e.revision, e.mode, e.idle_ttl_s, False) for e in entries if e.revision_id != active_id]
    return served


@dataclass(frozen=True)
class LeftOut:
    """A revision of the set the front door's document leaves out, and why."""

    served: Served
    reason: str


@dataclass(frozen=True)
class Clash:
    """A revision of a set that shares a port or a name with one before it (`first`)."""

    served: Served
    first: Served
    port: bool  # on the same port; else with the same name

    def __str__(self) -> str:
        first, it = self.first.revision.number, self.served.revision.number
        if self.port:
            return f"r{first} and r{it} would both listen on port {self.served.revision.port}"
        return f"r{first} and r{it} are both named {self.served.name}"


def one_port_one_name(members: Iterable[Served]) -> tuple[list[Served], list[Clash]]:
    """The rule of a set the host would refuse a whole table for, in one walk: each engine on a
    port of its own, each name once. (kept, clashes): a member is kept unless it shares a port or a
    name with one kept before it (the active revision first)."""
    kept: list[Served] = []
    clashes: list[Clash] = []
    ports: dict[int, Served] = {}
    names: dict[str, Served] = {}
    for served in members:
        on_port = ports.get(served.revision.port)
        first = on_port if on_port is not None else names.get(served.name)
        if first is not None:
            clashes.append(Clash(served, first, port=on_port is not None))
            continue
        ports[served.revision.port] = names[served.name] = served
        kept.append(served)
    return kept, clashes


def door_set(host: Host) -> tuple[list[Served], list[LeftOut]]:
    """The serving set as the front door's document carries it: the host's set less any revision
    `one_port_one_name` does not keep, which the host would refuse the whole table for. The
    services refuse such a set up front (set_rule_breaks, by the same rule); this keeps a set made
    before that rule, or by a race, from leaving the door on a stale table: the active revision
    serves, the host page says what was left out and why."""
    kept, clashes = one_port_one_name(served_set(host))
    why = ": take it out of the set, or serve a revision of it on a free port"
    return kept, [LeftOut(clash.served, f"{clash}{why}") for clash in clashes]


def host_capacity(host: Host) -> dict[str, int]:
    """Each device's memory as the host reported it (what a pinned set must fit in)."""
    if host.cpu_only:
        return {"ram": host.ram_bytes} if host.ram_bytes else {}
    return {f"gpu{g.index}": g.memory_bytes for g in host.gpus.all() if g.memory_bytes}


def _fit(host: Host, pinned: Iterable[DeploymentRevision]) -> list[str]:
    """Why the pinned revisions' planned memory does not fit the host ([] when it does)."""
    capacity = host_capacity(host)
    total: dict[str, int] = {}
    refused = []
    for revision in pinned:
        memory = revision_memory(revision)
        refused += [memory.refused] if memory.refused else []
        for device, size in memory.devices.items():
            total[device] = total.get(device, 0) + size
    return refused + [
        f"{device}: {fmt.size_bytes(need)} planned, {fmt.size_bytes(capacity[device])} present"
        for device, need in sorted(total.items())
        if device in capacity and need > capacity[device]
    ]


def set_rule_breaks(host: Host, members: list[Served]) -> list[str]:
    """Every rule of a serving set, checked on the whole set as the host would get it ([] when it
    keeps them all): one port per engine, each name once and none an alias, the pinned revisions
    fit the host's memory. The one check every path that changes the set asks (serving_mode_set,
    switch_request through switch_set_refusals); the agent refuses a table that breaks one."""
    _kept, clashes = one_port_one_name(members)
    reasons = [str(clash) for clash in clashes]
    names = [served.name for served in members]
    aliases = set(ModelAlias.objects.filter(host=host, name__in=names).values_list("name", flat=True))
    reasons += [f"{name} is an alias on {host.name}" for name in sorted(aliases)]
    pinned = [s.revision for s in members if s.mode == str(ServeMode.PINNED)]
    short = _fit(host, pinned) if len(pinned) > 1 else []  # one alone: the planner's (an admin may override)
    if short:
        reasons.append("the pinned revisions do not fit: " + "; ".join(short))
    return reasons


def door_labels(host: Host, kept: Iterable[Served] | None = None) -> dict[int, list[str]]:
    """The aliases of each revision the door serves (by revision id), by name; less an alias that is
    also a served model's name (made before that revision was served by a path that asks no rule:
    the agent would refuse the whole table for it), which the name wins."""
    kept = list(kept if kept is not None else door_set(host)[0])
    names = {s.name for s in kept}
    aliases: dict[int, list[str]] = {}
    for alias in ModelAlias.objects.filter(host=host, revision_id__in={s.revision.pk for s in kept}).order_by("name"):
        if alias.name not in names:
            aliases.setdefault(alias.revision_id, []).append(alias.name)
    return aliases


# --- the front door's document ---------------------------------------------------------------


def engine_threads(host: Host, revision: DeploymentRevision) -> int | None:
    """The CPU threads a revision's engine computes with on CPU-only `host`, which the door counts
    as cores of its room (hostagent/frontdoor/scheduler.py): the engine's threads knob as it is
    launched, else its default. llama.cpp's default is every physical core; counted here as all of
    the host's cores (`cpu_cores`, logical, the most the door's room holds): an engine left at its
    default takes the whole host, so two such engines are never loaded side by side sharing cores.
    None (not counted) on a GPU host, for an engine whose threads the panel does not read, or a
    host that has not reported its cores."""
    if not host.cpu_only:
        return None
    try:
        knob = get_adapter(revision.engine).threads_knob
    except EngineConfigError:
        return None
    if not knob:
        return None
    knobs = launch_knobs(engine=revision.engine, model=revision.model_variant, knobs=dict(revision.knobs or {}))
    threads = knobs.get(knob)
    if isinstance(threads, int) and not isinstance(threads, bool) and threads >= 1:
        return threads
    return host.cpu_cores or None


@dataclass(frozen=True)
class HostServing:
    """A host's serving set as its front door gets it: each model with its launch, and what the
    set leaves out (with why)."""

    host: Host
    models: tuple[DoorModel, ...]
    served: tuple[Served, ...]
    left: tuple[LeftOut, ...]

    def document(self) -> DoorDocument:
        """The front door's document, its `version` a digest of the rest (ETag, 304)."""
        door = FrontDoor.objects.filter(host=self.host).first() or FrontDoor(host=self.host)
        installs = self.host.engine_installs if isinstance(self.host.engine_installs, dict) else {}
        document = DoorDocument(
            version="",
            models=self.models,
            keys=key_table(),
            door=DoorLimits(
                max_waiting=door.max_waiting,
                max_wait_s=float(door.max_wait_s),
                drain_timeout_s=float(door.drain_timeout_s),
            ),
            engine_installs=installs,
        )
        encoded = json.dumps(document.to_dict(), sort_keys=True, separators=(",", ":"), default=str)
        return dataclasses.replace(document, version=hashlib.sha256(encoded.encode()).hexdigest()[:32])


def host_serving(host: Host, *, host_bound: bool = True) -> HostServing:
    """What `host`'s front door serves now: the set (`door_set`), each model with its revision's
    launch (the API key resolved only `host_bound`: for the host's own agent)."""
    kept, left = door_set(host)
    aliases = door_labels(host, kept)
    models = tuple(
        DoorModel(
            name=served.name,
            launch=revision_launch(served.revision, host_bound=host_bound),
            mode=str(served.mode),
            aliases=tuple(aliases.get(served.revision.pk, [])),
            idle_ttl_s=float(served.idle_ttl_s) if served.idle_ttl_s else None,
            threads=engine_threads(host, served.revision),
        )
        for served in kept
    )
    return HostServing(host, models, tuple(kept), tuple(left))

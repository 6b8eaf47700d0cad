"""Every export of a revision, for the exports page and `manage.py export`.

One entry point, `revision_export(revision, target)`, returns the file a target runs as it
is, or raises `NotExportable` with the reason. Targets:

- clients (serving.exports): opencode, hermes, aider-settings, aider-metadata, claude-code, codex
  (and the page's aider-env, curl, python), through the host's front door and the revision's alias when
  the door has reported and serves the revision (`door_route`), else at the engine itself, the
  page saying why; with the door, through the lab router (CONTROLPANEL_ROUTER_URL) and the same
  alias instead, by default when clients can reach the router (`ExportTargets`, `via`);
- the host's own launch, as a person would run it: start-script and systemd, with the same
  argv and environment as the revision's launch and the executable the host has installed
  for the revision's engine version (Host.engine_installs; systemd finds no bare `vllm`);
- ansible: the seed role's group_vars (serving.ansible_role), whose rendered start script
  runs that same argv and environment, or says in its header what differs and why.

Reads only. Secrets are never resolved: the API key appears masked where it goes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError

from deployments.engine_installs import revision_binary
from deployments.host_serving import served_set
from deployments.models import DeploymentRevision, FrontDoor, ModelAlias
from deployments.runtime_bridge import local_weights, runs_on_this_machine
from deployments.runtime_bridge import revision_launch_spec as bridged_launch_spec
from deployments.selectors.revision_views import revision_view
from hardware.models import Host
from serving.binds import Resolver, address_ips, address_refusal, is_loopback, system_resolve
from serving.engines.base import EngineConfigError, LaunchSpec
from serving.engines.registry import get_adapter
from serving.engines.scripts import render_start_script, render_systemd_unit
from serving.exports import (
    CLIENT_EXPORTS,
    ClientTarget,
    NamedExport,
    NotExportable,
    base_url_for,
    client_exports,
    client_target,
    client_warnings,
    through_door,
    through_router,
)

from .front_door import door_base_url
from .imports import revision_export_ansible
from .inference_keys import keys_required

CLIENT_TARGETS = ("opencode", "hermes", "aider-settings", "aider-metadata", "claude-code", "codex")
HOST_TARGETS = ("start-script", "systemd", "ansible")
TARGETS = CLIENT_TARGETS + HOST_TARGETS


@dataclass(frozen=True)
class TargetExport:
    target: str
    filename: str
    content: str
    notes: tuple[str, ...] = ()  # what the file could not say, and defaults it wrote (one line each)


def revision_launch_spec(revision: DeploymentRevision, *, need_binary: bool = True) -> LaunchSpec:
    """The revision's launch exactly as the host runs it (serving.launch.launch with the host's
    facts, runtime_bridge), the API key masked: the revision page shows the same argv.

    NotExportable when the executable is unknown (`need_binary`) or the stored settings do
    not make a launch."""
    if need_binary and revision_binary(revision) is None:
        version = revision.engine_version or "latest"
        raise NotExportable(
            f"no {revision.engine} {version} install is recorded on {revision.host.name}, so the path of the "
            "executable is unknown (a unit or script needs it; a bare name is found by no service manager): "
            "install the engine from the host page first"
        )
    try:
        return bridged_launch_spec(revision)
    except (EngineConfigError, KeyError) as exc:
        raise NotExportable(f"the revision's settings do not make a launch: {exc}") from exc


@dataclass(frozen=True)
class HostReach:
    """What `host`'s address is, judged once: `ips` what it is or resolves to on the panel's
    machine (empty for a name that does not resolve here), `why` why it may not be used ("")."""

    ips: tuple[str, ...]
    why: str


def host_reach(host: Host, *, resolve: Resolver | None = system_resolve) -> HostReach:
    """The one loopback rule (serving.binds.address_refusal: loopback, unspecified or link-local in
    any spelling, or a name that resolves to one here) applied to `host`'s address, unless the host
    is the panel's own machine (its engines are on this loopback). The addresses judged are the
    ones to connect to: the lab router pins them, so a name that resolves elsewhere later gains nothing."""
    address = (host.address or "").strip()
    try:
        ips = tuple(str(ip) for ip in address_ips(address, resolve=resolve)) if address else ()
    except (OSError, UnicodeError, ValueError):
        ips = ()
    if runs_on_this_machine(host):
        return HostReach(ips, "")
    why = address_refusal(address, resolve=lambda _name: ips)
    if not why:
        return HostReach(ips, "")
    return HostReach(
        ips,
        f"{host.name}'s address: {why}; an admin sets the address laptops reach {host.name} at "
        "(its host page, Address), and binds its engines where they can reach them "
        "(CONTROLPANEL_ENGINE_BIND_HOST, docs/gpu-hosts.md)",
    )


def unreachable_reason(host: Host) -> str:
    """Why neither the panel (the lab router, the playground) nor a client on another machine may
    use `host`'s address ("" when they may): `host_reach`'s verdict."""
    return host_reach(host).why


def revision_client_target(revision: DeploymentRevision) -> ClientTarget:
    """The revision's engine itself: the host's reachable address and the revision's port (the
    playground's address; the exports' when the front door cannot carry them)."""
    return client_target(
        revision_view(revision, memory=False),
        base_url=base_url_for(revision.host.address or "127.0.0.1", revision.port),
        api_key_required=bool(revision.api_key_secret),
        unreachable=unreachable_reason(revision.host),
    )


@dataclass(frozen=True)
class DoorRoute:
    base_url: str  # the front door's /v1 ("" when the configs cannot go through it)
    model: str  # the name the door answers for the revision: its alias, or its own name
    why: str  # the route for the page: the door and the name, or why the configs name the engine


def door_route(revision: DeploymentRevision) -> DoorRoute:
    """Where client configs reach `revision` through its host's front door (docs/front-door.md,
    Clients): the host's reachable address and the port of the door's last report, the model
    named by the revision's alias (the first by name) so a switch that moves it breaks nothing."""
    host = revision.host
    direct = "these configs name the engine directly, and the next switch breaks them"
    door = FrontDoor.objects.filter(host=host).first()
    if door is None or door.reported_at is None:
        return DoorRoute(
            "", "", f"{host.name}'s front door has not reported (off, or its agent has none yet): {direct}"
        )
    served = {s.revision.pk: s.name for s in served_set(host)}
    if revision.pk not in served:
        return DoorRoute(
            "", "", f"{host.name}'s front door does not serve r{revision.number} (not in its serving set): {direct}"
        )
    url, problem = door_base_url(host, door)
    if problem:
        return DoorRoute("", "", f"{problem}: {direct}")
    alias = ModelAlias.objects.filter(host=host, revision=revision).order_by("name").first()
    if alias is not None:
        return DoorRoute(url, alias.name, f"{host.name}'s front door as the alias {alias.name}: a switch moves it")
    return DoorRoute(
        url,
        served[revision.pk],
        f"{host.name}'s front door as {served[revision.pk]}, r{revision.number}'s own name: "
        "give it an alias (manage.py alias set) and the configs survive a switch",
    )


VIA = ("router", "door")  # where client configs may point: the lab router, or the host's own front door


@dataclass(frozen=True)
class ExportTargets:
    """Where a revision's client configs can point. `door`: through its host's front door and
    alias (`door_route`), else the engine itself (its `route` says why). `router`: through the
    lab router with the same name, when there is a router and the door carries the revision;
    else None and `router_why` says why."""

    door: ClientTarget
    router: ClientTarget | None
    router_why: str = ""

    @property
    def default_via(self) -> str:
        """The router when clients can reach it, else the host's door."""
        return "router" if self.router is not None and not self.router.unreachable else "door"

    def pick(self, via: str | None = None) -> ClientTarget:
        """`via` ("router" or "door"; None: `default_via`); the door when there is no router."""
        if self.router is not None and (via or self.default_via) == "router":
            return self.router
        return self.door


def _router_unreachable(url: str, host: Host) -> str:
    """Why clients on other machines cannot reach the router at `url` ("" when they can): a URL the
    one loopback rule refuses (serving.binds.address_refusal, as written: clients resolve its name),
    unless the revision's host is this machine too (a lab of one machine)."""
    why = address_refusal(urlsplit(url).hostname or "")
    if not why or runs_on_this_machine(host):
        return ""
    return (
        f"the lab router's URL is {url}, where {why}; set CONTROLPANEL_ROUTER_URL "
        "to where laptops reach the router (and CONTROLPANEL_ROUTER_BIND where it listens for them, "
        "docs/configuration.md)"
    )


def revision_export_targets(revision: DeploymentRevision) -> ExportTargets:
    """Every place the client configs of `revision` can point (ExportTargets)."""
    host = revision.host
    direct = revision_client_target(revision)
    route = door_route(revision)
    if not route.base_url:
        why = f"the router reaches revisions through their host's front door, and {host.name}'s does not carry it"
        return ExportTargets(replace(direct, route=route.why), None, why)
    door = through_door(
        direct,
        base_url=route.base_url,
        model=route.model,
        api_key_required=keys_required(),
        route=route.why,
    )
    if not settings.ROUTER_URL:
        return ExportTargets(door, None, "there is none (CONTROLPANEL_ROUTER_BIND=off, no CONTROLPANEL_ROUTER_URL)")
    if door.unreachable:  # the router reaches the door where clients would: the host's address
        return ExportTargets(door, None, f"the router cannot reach {host.name}'s front door either: {door.unreachable}")
    name = door.served_name
    router = through_router(
        door,
        base_url=f"{settings.ROUTER_URL}/v1",
        route=(
            f"the lab router as {name}: one URL for the lab, to whichever host serves {name} (another host's "
            f"{name} may be another revision); here {route.why}"
        ),
        unreachable=_router_unreachable(settings.ROUTER_URL, host),
    )
    return ExportTargets(door, router)


def revision_export_target(revision: DeploymentRevision, via: str | None = None) -> ClientTarget:
    """What the client configs say (ExportTargets.pick): the lab router, the host's front door
    and the alias, or the engine itself with the reason in `route`."""
    return revision_export_targets(revision).pick(via)


def revision_client_exports(revision: DeploymentRevision, via: str | None = None) -> list[NamedExport]:
    return client_exports(revision_export_target(revision, via))


def _model_reference_problem(revision: DeploymentRevision) -> str:
    """Why the engine could not find the revision's model by the name it is given ("" if it can)."""
    variant = revision.model_variant
    loads_hub_name = get_adapter(revision.engine).loads_hub_repository
    if loads_hub_name and not variant.repo_id and variant.format == "hf" and not local_weights(revision.host, variant):
        return (
            f"the model {variant.name!r} has no repository id in the catalog, so the engine would look for a "
            f"hub repository named {variant.name!r}, which does not exist: add its repo id to the catalog"
        )
    return ""


def loopback_warning(target: ClientTarget) -> str:
    """Client configs that name a loopback URL work on the panel's own machine only: the warning
    the exports page and `manage.py export` give them ("" when they name an address others reach)."""
    host = urlsplit(target.base_url).hostname or ""
    if not host or not is_loopback(host):
        return ""
    return (
        f"{target.base_url} is a loopback address: these configs work on the panel's own machine only; "
        "for other machines set CONTROLPANEL_LAN_ADDRESS to this machine's LAN address and restart the panel "
        '(docs/configuration.md, "Serving the LAN"), or set the host\'s address on its page'
    )


def revision_export(revision: DeploymentRevision, target: str, via: str | None = None) -> TargetExport:
    """The file `target` runs for `revision` (module docstring), or NotExportable; a client's
    through `via` ("router" or "door", ExportTargets.pick)."""
    if target in CLIENT_TARGETS:
        _title, build = CLIENT_EXPORTS[target]
        targets = revision_export_targets(revision)
        client = targets.pick(via)
        made = build(client)
        where = "through" if client.via_door else "at the engine itself:"
        notes = [f"{where} {client.route}", *(f"warning: {w}" for w in client_warnings(target, client))]
        if loopback_warning(client):
            notes.append(f"warning: {loopback_warning(client)}")
        if via == "router" and targets.router is None:
            notes.append(f"not through the lab router: {targets.router_why}")
        return TargetExport(target, made.filename, made.content, tuple(notes))
    if target not in HOST_TARGETS:
        raise NotExportable(f"unknown export target {target!r} (one of {', '.join(TARGETS)})")
    problem = _model_reference_problem(revision)
    if problem:
        raise NotExportable(problem)
    if target == "ansible":
        try:
            exported = revision_export_ansible(revision, binary=revision_binary(revision))
        except ValidationError as exc:
            raise NotExportable("; ".join(exc.messages)) from exc
        notes = [f"default written: {k} ({why})" for k, why in exported.defaults.items()]
        notes += [f"not exported: {k} ({why})" for k, why in exported.not_exported.items()]
        notes += [f"written !unsafe (Ansible will not evaluate its Jinja): {k}" for k in exported.inert]
        name = f"{revision.host.name}-r{revision.number}-all.yml"
        return TargetExport(target, name, exported.text, tuple(notes))
    spec = revision_launch_spec(revision)
    if target == "start-script":
        return TargetExport(target, "start.sh", render_start_script(spec))
    return TargetExport(target, f"{spec.engine.replace('.', '')}.service", render_systemd_unit(spec))

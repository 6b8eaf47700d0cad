"""Which executable a revision runs on its host, as far as the panel knows it.

The host records each engine install it makes (Host.engine_installs[engine][version], with
the executable's path); an Ansible import names the role's venv. Exports and the revision
page use this, so their command is the one the host runs, never a bare `vllm` that no
service manager finds. Reads the host row only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments.models import DeploymentRevision
from hardware.models import Host
from serving.engines.base import EngineConfigError
from serving.engines.registry import LATEST, get_adapter, recorded_installs, requested_install_key
from serving.engines.versions import newest_first, parse_version


def _in_folder(engine: str) -> str | None:
    """The executable an install of `engine` keeps in its folder (the adapter's install layout)."""
    try:
        return get_adapter(engine).install_executable
    except EngineConfigError:
        return None


def ansible_venv(revision: DeploymentRevision) -> str | None:
    """The role's venv an Ansible import kept (vllm_venv_dir), when it is a plain path."""
    extras = revision.extras if isinstance(revision.extras, dict) else {}
    kept = extras.get("ansible")
    ignored = kept.get("ignored_known") if isinstance(kept, dict) else None
    venv = ignored.get("vllm_venv_dir") if isinstance(ignored, dict) else None
    return venv.rstrip("/") if isinstance(venv, str) and venv.startswith("/") and "{" not in venv else None


def carried_builds(host: Host) -> dict[str, Any]:
    """The builds the host's worker carries itself, by engine, as the host last reported them."""
    state = host.engine_state if isinstance(host.engine_state, dict) else {}
    carried = state.get("carried")
    return carried if isinstance(carried, dict) else {}


def carried_build(host: Host, engine: str) -> str:
    """The build of `engine` the host's worker carries itself, as the host last reported ("" if none)."""
    found = carried_builds(host).get(engine)
    return found if isinstance(found, str) else ""


@dataclass(frozen=True)
class RecordedInstall:
    """One install the host recorded (Host.engine_installs[engine][key]) and its executable."""

    key: str  # the version it was recorded under (LATEST: an install of no version asked for)
    entry: dict[str, Any]
    executable: str | None  # None: its folder alone is known (the agent finds the executable in it)


def install_run(host: Host, engine: str, version: str) -> RecordedInstall | None:
    """The recorded install a revision of `engine` `version` runs on `host`, chosen as its agent
    chooses (hostagent.binaries.resolve_install, which then checks the disk): a pinned version its
    own install (the adapter's spelling of it: "v0.33.0" is 0.33.0), "latest" (or none) the newest
    install that names its executable or folder; None when the host recorded none (then its agent
    looks further: its own build, PATH)."""
    recorded = recorded_installs(host.engine_installs, engine)
    try:
        key = requested_install_key(engine, version)
    except EngineConfigError:
        return None
    inside = _in_folder(engine)
    for candidate in newest_first(engine, recorded) if key == LATEST else [key]:
        entry = recorded.get(candidate)
        if not isinstance(entry, dict):
            continue
        binary, folder = entry.get("binary"), entry.get("path")
        if isinstance(binary, str) and binary.startswith("/"):
            return RecordedInstall(candidate, entry, binary)
        if isinstance(folder, str) and folder.startswith("/"):
            return RecordedInstall(candidate, entry, f"{folder.rstrip('/')}/{inside}" if inside else None)
    return None


def host_binary(host: Host, engine: str, version: str) -> str | None:
    """The executable of the install a revision of `engine` `version` runs on `host` (install_run);
    None when the host recorded none, or only its folder."""
    run = install_run(host, engine, version)
    return run.executable if run is not None else None


def version_at_latest(host: Host, engine: str) -> str:
    """The release of `engine` a revision at "latest" runs on `host`, as the host reported it: that
    of the install it runs (install_run; an install recorded as "latest" by the package version it
    installed), else the build its worker carries; "" when neither names a release the adapter
    reads (the planner then judges the latest release it knows)."""
    run = install_run(host, engine, "")
    if run is not None:
        found = run.key
        if found == LATEST:
            package = run.entry.get("package_version")
            found = get_adapter(engine).version_from_distribution(package) if isinstance(package, str) else ""
    else:
        found = carried_build(host, engine)
    try:
        parse_version(engine, found)
    except EngineConfigError:
        return ""
    return found


def install_packages(host: Host, engine: str, version: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """The packages of the venv a revision of `engine` `version` runs on `host` (install_run), as
    the host read them when it recorded that install (its details' "packages": {distribution:
    version, or null where the venv had none}): (the versions found, the distributions looked for
    and not found), for PlanRequest.packages and packages_absent. Nothing when the host recorded no
    such install, or none of its packages (then they are unknown)."""
    run = install_run(host, engine, version)
    read = run.entry.get("packages") if run is not None else None
    if not isinstance(read, dict):
        return {}, ()
    found = {d: v for d, v in read.items() if isinstance(d, str) and isinstance(v, str) and 0 < len(v) <= 40}
    absent = tuple(sorted(d for d, v in read.items() if isinstance(d, str) and v is None))
    return found, absent


def _carried_executable(host: Host, engine: str, version: str) -> str | None:
    """The executable of the build the host's worker carries itself (its agent reports it), which a
    revision runs when nothing is installed: at "latest", or pinned to that very build."""
    state = host.engine_state if isinstance(host.engine_state, dict) else {}
    paths = state.get("carried_executables")
    path = paths.get(engine) if isinstance(paths, dict) else None
    if not isinstance(path, str) or not path.startswith("/"):
        return None
    try:
        pinned = get_adapter(engine).install_version(version) if version else ""
    except EngineConfigError:
        return None
    return path if not pinned or pinned == carried_build(host, engine) else None


def revision_binary(revision: DeploymentRevision) -> str | None:
    """The executable the revision runs on its host: the install of its engine version the host
    recorded, else the venv an Ansible import named; None when neither is known."""
    found = host_binary(revision.host, revision.engine, revision.engine_version)
    if found:
        return found
    carried = _carried_executable(revision.host, revision.engine, revision.engine_version)
    if carried:
        return carried
    venv = ansible_venv(revision)  # only a vLLM role names one
    inside = _in_folder(revision.engine)
    return f"{venv}/{inside}" if venv and inside else None

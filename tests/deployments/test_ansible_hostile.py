"""Hostile Ansible group_vars (issue 11): alias bombs, oversized and deep values, object
tags, NUL/NaN, and Jinja that would run on whoever applies our export.

The export's `!unsafe` tag was checked with the real tool (ansible-core 2.19.14,
`ansible-playbook -i localhost, -c local`): a `{{ lookup('pipe', 'touch …') }}` value runs
the command when live, and prints as literal text and runs nothing when tagged `!unsafe`, as
a scalar, a list item, a nested value and a mapping key. These tests pin the tag on every
templated scalar of an export; test_exports_launch.py also renders an export with the real
ansible-core, which the test command installs.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.models import AuditEvent
from deployments.models import DeploymentRevision, ModelVariant
from deployments.services.imports import revision_export_ansible, revision_import_ansible
from serving.ansible_role import RoleInput
from serving.ansible_vars import (
    MAX_ALIASES,
    AnsibleVarsError,
    is_plain_reference,
    is_template,
    load_group_vars,
    parse_group_vars,
    render_group_vars,
)
from tests.hardware.factories import HostFactory

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ansible"
GROUP_VARS = (FIXTURES / "all.yml").read_text()
LOOKUP = "{{ lookup('pipe', 'id') }}"


def billion_laughs(levels: int, width: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(['"lol"'] * width) + "]"]
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def live_templates(text: str) -> list[str]:
    """Scalars (keys included) of a YAML text that Ansible would template: they hold Jinja
    markers and are not tagged `!unsafe` (composed, not constructed: tags stay visible)."""
    found: list[str] = []
    stack = [yaml.compose(text, Loader=yaml.SafeLoader)]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if is_template(node.value) and node.tag != "!unsafe":
                found.append(node.value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.extend((key, value))
    return found


class _UnsafeAware(yaml.SafeLoader):
    """Reads `!unsafe` as ("unsafe", text), so a test sees which values carry the tag."""


def _tagged(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:
    return ("unsafe", loader.construct_scalar(node))


_UnsafeAware.add_constructor("!unsafe", _tagged)


def export(imported: Any, **overrides: Any) -> Any:
    values = {
        "engine": imported.engine,
        "model": imported.model or "some/model",
        "knobs": imported.knobs,
        "env": imported.env,
        "host": imported.host,
        "port": imported.port,
        "preserved": imported.preserved(),
    }
    values.update(overrides)
    engine = values.pop("engine")
    return render_group_vars(engine, RoleInput(**values))


# --- YAML that expands or nests without limit ------------------------------------------------


@pytest.mark.parametrize("levels", [4, 6, 9, 12])
def test_billion_laughs_is_refused_fast_with_a_clear_message(levels):
    text = billion_laughs(levels)
    assert len(text) < 1_000  # under a kilobyte ...
    started = time.perf_counter()
    with pytest.raises(AnsibleVarsError, match="alias bomb"):
        load_group_vars(text)
    assert time.perf_counter() - started < 0.5  # ... refused before anything expands


def test_a_few_aliases_that_still_expand_too_far_are_refused_after_parsing():
    # Within the alias budget, but each alias is a 1,000-item list: 11,000 values once expanded.
    text = "base: &b [" + ", ".join(["x"] * 1000) + "]\n" + "".join(f"v{i}: *b\n" for i in range(10))
    with pytest.raises(AnsibleVarsError, match="once YAML aliases are expanded"):
        load_group_vars(text)
    # A 90 KB string repeated by aliases: bounded by total text, not only by count.
    text = 'big: &s "' + "x" * 90_000 + '"\n' + "".join(f"v{i}: *s\n" for i in range(MAX_ALIASES))
    with pytest.raises(AnsibleVarsError, match="characters of text once YAML aliases are expanded"):
        load_group_vars(text)


def test_a_few_honest_aliases_and_merge_keys_still_load():
    text = "defaults: &d {restart: on-failure, sec: 10}\nservice:\n  <<: *d\n  name: vllm\nother: *d\n"
    data = load_group_vars(text)
    assert data["service"] == {"restart": "on-failure", "sec": 10, "name": "vllm"}


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 5_000 + "]" * 5_000,  # flow style, far past Python's recursion limit
        "a: " + "{b: " * 3_000 + "1" + "}" * 3_000,
        "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 60)) + "  " * 60 + "x: 1\n",  # block style
        "a: " + "[" * 20 + "1" + "]" * 20,  # within the composer's budget, past the stored depth
    ],
)
def test_deep_nesting_is_refused(text):
    with pytest.raises(AnsibleVarsError, match="nested"):
        load_group_vars(text)


def test_huge_values_after_parsing_are_refused():
    with pytest.raises(AnsibleVarsError, match="values"):
        load_group_vars("a: [" + ", ".join(["1"] * 6_000) + "]\n")
    with pytest.raises(AnsibleVarsError, match="YAML values"):  # stopped while composing
        load_group_vars("a: [" + ", ".join(["1"] * 30_000) + "]\n")
    with pytest.raises(AnsibleVarsError, match="too long"):
        load_group_vars('a: "' + "x" * 200_000 + '"\n')
    with pytest.raises(AnsibleVarsError, match="larger than"):
        load_group_vars("# " + "x" * 1_100_000)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('a: !!python/object/apply:os.system ["id"]', "YAML tag"),
        ("a: !!python/name:os.system", "YAML tag"),
        ("a: !custom x", "YAML tag"),
        ("a: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6134", "vault-encrypted"),
        ("a: !!binary aGk=", "YAML tag"),
        ("a: !!set {x, y}", "YAML tag"),
        ("1: x", "not text"),
        ("null: x", "not text"),
        ("true: x", "not text"),
        ("? [a]\n: b", "not valid YAML"),
        ("a: {1: 2}", "key that is not text"),
        ("a-b: 1", "not a valid Ansible variable name"),
        ('a: "x\\0y"', "NUL"),
        ('a: [x, {b: "\\0"}]', "NUL"),
        ("a: .nan", "finite"),
        ("a: [1, -.inf]", "finite"),
        ("a: {b: .Inf}", "finite"),
        ("a: 99999999999999999999999", "out of range"),
        ("a: &x 1\nb: *y", "not valid YAML"),
        ("a: 1\n---\nb: 2\n", "not valid YAML"),
        ("- a\n- b\n", "mapping"),
    ],
)
def test_unsafe_yaml_is_refused_with_one_clear_sentence(text, match):
    with pytest.raises(AnsibleVarsError, match=match) as exc:
        load_group_vars(text)
    assert "Traceback" not in str(exc.value) and len(str(exc.value)) < 400


def test_dates_stay_text_and_unsafe_tags_are_read():
    data = load_group_vars("when: 2024-01-01\nliteral: !unsafe '{{ x }}'\nlisted: !unsafe [a, b]\n")
    assert data == {"when": "2024-01-01", "literal": "{{ x }}", "listed": ["a", "b"]}


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("vllm_max_model_len", '"1e999"'),
        ("vllm_max_model_len", '"nan"'),
        ("vllm_gpu_memory_utilization", '"inf"'),
        ("vllm_max_num_seqs", '"' + "9" * 5_000 + '"'),
        ("vllm_port", '"-inf"'),
        ("vllm_cpu_offload_gb", '"1e400"'),
    ],
)
def test_numbers_in_text_must_be_finite(variable, value):
    lines = [line for line in GROUP_VARS.splitlines() if not line.startswith(f"{variable}:")]
    text = "\n".join(lines) + f"\n{variable}: {value}\n"
    with pytest.raises(AnsibleVarsError, match=f"{variable} (must be a finite number|is out of range)"):
        parse_group_vars(text)


@pytest.mark.parametrize(
    "value",
    [
        '\'{"method": "mtp", "num_speculative_tokens": NaN}\'',
        "'{\"x\": Infinity}'",
        "'" + "[" * 3_000 + "]" * 3_000 + "'",
    ],
)
def test_json_in_text_is_checked_too(value):
    text = GROUP_VARS.replace('vllm_speculative_config: ""', f"vllm_speculative_config: {value}")
    with pytest.raises(AnsibleVarsError, match="vllm_speculative_config"):
        parse_group_vars(text)


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ("vllm_model: philbert440/Qwen3.8-27B-W4A16-AWQ", "vllm_model: [a, b]", "vllm_model must be a single value"),
        ("vllm_reasoning_parser: qwen3", "vllm_reasoning_parser: {a: b}", "vllm_reasoning_parser"),
    ],
)
def test_settings_that_must_be_one_value(old, new, match):
    with pytest.raises(AnsibleVarsError, match=match):
        parse_group_vars(GROUP_VARS.replace(old, new))


def test_ollama_models_must_be_tags():
    text = GROUP_VARS.replace("inference_engine: vllm", "inference_engine: ollama").replace(
        "ollama_models:\n  - qwen3.8:27b", "ollama_models: {a: b}"
    )
    with pytest.raises(AnsibleVarsError, match="ollama_models"):
        parse_group_vars(text)


# --- Jinja ------------------------------------------------------------------------------------


PLACEMENTS = {
    "knob": ("vllm_max_num_seqs: 4", f'vllm_max_num_seqs: "{LOOKUP}"', "vllm_max_num_seqs"),
    "env": ("vllm_hf_cache_dir: /opt/vllm/hf-cache", f'vllm_hf_cache_dir: "{LOOKUP}"', "vllm_hf_cache_dir"),
    "nested list": (
        'vllm_speculative_config: ""',
        f'vllm_speculative_config: {{method: mtp, extra: [1, "{LOOKUP}"]}}',
        "vllm_speculative_config",
    ),
    "key": ('vllm_rope_scaling: ""', f'vllm_rope_scaling: {{"{LOOKUP}": 1}}', "vllm_rope_scaling"),
    "unknown": ('vllm_min_version: "0.17"', f'my_site_var: ["ok", {{deep: "{LOOKUP}"}}]', "my_site_var"),
    "ignored": ("vllm_log_dir: /var/log/vllm", f'vllm_log_dir: "/var/log/{LOOKUP}"', "vllm_log_dir"),
    "secret": ('vllm_api_key: ""', f'vllm_api_key: "{LOOKUP}"', "vllm_api_key"),
    "filter on a safe name": (
        'vllm_user: "{{ ansible_user }}"',
        "vllm_user: \"{{ ansible_user | d('x') }}\"",
        "vllm_user",
    ),
}


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_jinja_never_becomes_a_setting_and_is_exported_inert(placement):
    old, new, variable = PLACEMENTS[placement]
    assert old in GROUP_VARS
    imported = parse_group_vars(GROUP_VARS.replace(old, new))
    settings_text = json.dumps([imported.knobs, imported.env, imported.model, imported.host, imported.port])
    assert "lookup" not in settings_text and "{{" not in settings_text
    note = next(w for w in imported.warnings if "were not evaluated" in w)
    assert variable in note and "!unsafe" in note
    exported = export(imported)
    references = 1 if placement == "filter on a safe name" else 2  # vllm_user, docker_users
    assert live_templates(exported.text) == ["{{ ansible_user }}"] * references
    if "lookup" in exported.text:  # else the revision's own value replaced it (e.g. "" for off)
        assert variable in exported.inert
        assert variable in exported.text.split("Variables: ")[1].splitlines()[0]
    # A second round trip keeps it inert (our loader reads !unsafe as text).
    again = parse_group_vars(exported.text)
    assert "lookup" not in json.dumps([again.knobs, again.env])
    assert live_templates(export(again).text) == live_templates(exported.text)


def test_the_seed_references_stay_live_and_are_said_to_run_nothing():
    imported = parse_group_vars(GROUP_VARS)
    assert any("vllm_user, docker_users refer to another variable" in w for w in imported.warnings)
    exported = export(imported)
    assert exported.inert == ()
    assert "vllm_user: '{{ ansible_user }}'" in exported.text


@pytest.mark.parametrize(
    ("text", "variable", "live"),
    [
        ("{{ ansible_user }}", "anything", True),
        ("{{inventory_hostname}}", "anything", True),
        ("{{ vault_hf_token }}", "vllm_hf_token", True),
        ("{{ vault_vllm_api_key }}", "vllm_api_key", True),
        ("{{ vault_hf_token }}", "vllm_api_key", False),  # another secret's vault variable
        ("{{ vault_hf_token }}", "open_webui_secret", False),
        ("{{ vault_root_password }}", "vllm_hf_token", False),
        ("{{ hostvars }}", "x", False),
        ("{{ ansible_password }}", "x", False),
        ("{{ ansible_user | default('x') }}", "x", False),
        ("{{ ansible_user.__class__ }}", "x", False),
        ("{{ ansible_user }}{{ x }}", "x", False),
        ("{{- ansible_user -}}", "x", False),
        ("{% raw %}{{ ansible_user }}", "x", False),
    ],
)
def test_only_plain_safe_references_stay_live(text, variable, live):
    assert is_plain_reference(text, variable=variable) is live
    exported = render_group_vars("vllm", RoleInput(model="m", knobs={}, preserved={variable: [text]}))
    assert (text in live_templates(exported.text)) is live
    assert (variable in exported.inert) is not live


def test_is_template_looks_everywhere():
    assert is_template({"a": [1, {"b": ["{# c #}"]}]})
    assert is_template({"{% if x %}": 1})
    assert is_template(("x", "{{y}}"))
    assert not is_template({"a": [1, "b", None, 2.5, {"c": "{ not jinja }"}]})


def test_knobs_typed_in_the_ui_are_exported_inert_too():
    exported = render_group_vars(
        "vllm",
        RoleInput(
            model="{{ lookup('env', 'HOME') }}",
            knobs={"reasoning_parser": LOOKUP, "tool_call_parser": "{% for x in y %}"},
            env={"HF_HOME": f"/data/{LOOKUP}"},
            host=LOOKUP,
        ),
    )
    assert live_templates(exported.text) == []
    assert set(exported.inert) >= {"vllm_model", "vllm_reasoning_parser", "vllm_hf_cache_dir", "vllm_host"}
    assert "# Values tagged !unsafe" in exported.text


def test_invalid_stored_variables_are_left_out_and_said_so():
    exported = render_group_vars(
        "vllm",
        RoleInput(
            model="m",
            knobs={},
            preserved={"bad name": 1, "ok": "x", "deep": [[[[[[[[[[[[[[1]]]]]]]]]]]]]]},
        ),
    )
    assert exported.not_exported["bad name"] == "not a valid Ansible variable name"
    assert "deep" in exported.not_exported
    assert "ok: x" in exported.text


# --- fuzz: the parser raises AnsibleVarsError or returns, nothing else ------------------------


_names = st.sampled_from(
    sorted({line.split(":")[0] for line in GROUP_VARS.splitlines() if line[:1].isalpha()}) + ["x", "my_var"]
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=30),
    st.sampled_from([LOOKUP, "{{ ansible_user }}", "nan", "1e999", "none", "auto", "0.95", '{"a": NaN}', "{%", ""]),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_names, _values, max_size=12), st.sampled_from(["vllm", "ollama", "sglang", None]))
def test_fuzz_parsed_mappings(variables, engine):
    if engine is not None:
        variables["inference_engine"] = engine
    text = yaml.safe_dump(variables)
    try:
        imported = parse_group_vars(text)
    except AnsibleVarsError:
        return
    assert "lookup" not in json.dumps([imported.knobs, imported.env, imported.model, imported.host], default=str)
    exported = export(imported)
    assert set(live_templates(exported.text)) <= {"{{ ansible_user }}"}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\" \n\t#%,?.0\x00")), max_size=120))
def test_fuzz_raw_text(text):
    with contextlib.suppress(AnsibleVarsError):
        parse_group_vars(text)


# --- the service and the commands ---------------------------------------------------------------


def _import(host: Any, operator: Any, text: str) -> Any:
    return revision_import_ansible(host=host, text=text, message="from Ansible", actor=operator)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "text",
    [
        billion_laughs(9),
        "a: " + "[" * 5_000 + "]" * 5_000,
        GROUP_VARS + "\nbig: [" + ", ".join(["1"] * 6_000) + "]\n",
        GROUP_VARS + "\nx: !!python/object/apply:os.system [id]\n",
        GROUP_VARS.replace("vllm_max_model_len: 262144", "vllm_max_model_len: .inf"),
        GROUP_VARS.replace("philbert440/Qwen3.8-27B-W4A16-AWQ", "someone/New-7B") + '\nx: "\\0"\n',
    ],
)
def test_a_refused_file_is_a_form_error_and_changes_nothing(catalog, operator, text):
    host = HostFactory(name="lab", model_dirs=["/opt/vllm"])
    variants, events = ModelVariant.objects.count(), AuditEvent.objects.count()
    with pytest.raises(ValidationError) as exc:
        _import(host, operator, text)
    assert list(exc.value.message_dict) == ["text"]
    assert exc.value.message_dict["text"][0].startswith("Not a group_vars file the panel accepts: ")
    assert not DeploymentRevision.objects.exists()
    assert ModelVariant.objects.count() == variants
    assert AuditEvent.objects.count() == events


@pytest.mark.django_db
@pytest.mark.parametrize("placement", ["knob", "env", "nested list", "key", "unknown", "secret"])
def test_imported_jinja_is_never_stored_as_a_setting_and_the_notes_say_so(catalog, operator, placement):
    old, new, variable = PLACEMENTS[placement]
    host = HostFactory(name="lab", model_dirs=["/opt/vllm"])
    result = _import(host, operator, GROUP_VARS.replace(old, new))
    revision = DeploymentRevision.objects.get(pk=result.revision.pk)
    assert "lookup" not in json.dumps([revision.knobs, revision.env, revision.served_name])
    assert any(variable in n and "!unsafe" in n for n in result.notes)
    assert revision.extras["ansible"]["notes"] == list(result.notes)
    assert live_templates(revision_export_ansible(revision).text) == ["{{ ansible_user }}", "{{ ansible_user }}"]


@pytest.mark.django_db
def test_old_revisions_with_stored_jinja_export_inert(catalog, operator):
    host = HostFactory(name="lab", model_dirs=["/opt/vllm"])
    revision = _import(host, operator, GROUP_VARS).revision
    extras = {
        "ansible": {
            "unknown": {"site_cmd": LOOKUP, "nested": {"list": ["ok", LOOKUP], LOOKUP: "key"}},
            "ignored_known": {"vllm_user": "{{ ansible_user }}", "vllm_log_dir": f"/var/log/{LOOKUP}"},
            "templated": {"vllm_port": LOOKUP, "vllm_api_key": "{{ lookup('pipe', 'cat /root/.ssh/id_rsa') }}"},
            "bind_host": LOOKUP,
            "notes": [],
        }
    }
    DeploymentRevision.objects.filter(pk=revision.pk).update(extras=extras)
    revision.refresh_from_db()
    exported = revision_export_ansible(revision)
    assert live_templates(exported.text) == ["{{ ansible_user }}"]
    # vllm_port: the revision's own port (8001) wins over the stored template.
    assert set(exported.inert) == {"site_cmd", "nested", "vllm_log_dir", "vllm_api_key"}
    literal = yaml.load(exported.text, Loader=_UnsafeAware)  # noqa: S506 - a SafeLoader subclass
    # A stored Jinja bind host never reaches the export: it binds where the engine really binds.
    assert literal["vllm_host"] == django_settings.ENGINE_BIND_HOST
    assert literal["nested"] == {"list": ["ok", ("unsafe", LOOKUP)], ("unsafe", LOOKUP): "key"}
    assert literal["vllm_port"] == 8001
    assert literal["vllm_api_key"] == ("unsafe", "{{ lookup('pipe', 'cat /root/.ssh/id_rsa') }}")

    out, err = io.StringIO(), io.StringIO()
    call_command("export_ansible", "--host", "lab", "--revision", str(revision.number), stdout=out, stderr=err)
    assert out.getvalue() == exported.text
    assert "written !unsafe (Ansible will not evaluate its Jinja): site_cmd" in err.getvalue()


@pytest.mark.django_db
def test_malformed_stored_extras_do_not_break_the_export(catalog, operator):
    host = HostFactory(name="lab", model_dirs=["/opt/vllm"])
    revision = _import(host, operator, GROUP_VARS).revision
    for extras in ({"ansible": []}, {"ansible": {"unknown": [1, 2], "templated": "x", "bind_host": {"a": 1}}}, []):
        DeploymentRevision.objects.filter(pk=revision.pk).update(extras=extras)
        revision.refresh_from_db()
        assert revision_export_ansible(revision).text.startswith("---\n")


@pytest.mark.django_db
def test_import_command_refuses_an_alias_bomb_with_one_line(catalog, operator, tmp_path):
    HostFactory(name="lab", model_dirs=["/opt/vllm"])
    bomb = tmp_path / "bomb.yml"
    bomb.write_text(billion_laughs(12))
    with pytest.raises(CommandError, match="alias bomb"):
        call_command("import_ansible", str(bomb), "--host", "lab", "--message", "x")
    assert not DeploymentRevision.objects.exists()

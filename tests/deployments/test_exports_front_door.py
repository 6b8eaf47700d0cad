"""Client exports through the host's front door (issue 27, Aliases): opencode, Hermes and aider
name the door and the revision's alias, so the config a user saved survives every switch; the key
is the user's inference key, never the engine's; without a door report they keep the engine's
own URL and the page says why."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from deployments.models import ModelVariant
from deployments.services.aliases import alias_set
from deployments.services.exports import revision_export, revision_export_target
from deployments.services.front_door import front_door_report
from deployments.services.inference_keys import key_create
from deployments.services.revisions import revision_create, revision_mark_active
from deployments.services.secrets import secret_set
from deployments.services.serving_set import serving_mode_set
from hardware.models import Host
from serving.exports import NotExportable
from tests.hardware.factories import HostFactory

pytestmark = pytest.mark.django_db
CLIENTS = ("opencode", "hermes", "aider-settings", "aider-metadata")
DOOR = "http://10.0.0.7:4100/v1"
ENGINE_KEY = "sk-engine-lab-0123456789"


@pytest.fixture
def lab(admin_user: User, operator: User) -> dict[str, Any]:
    """A host at 10.0.0.7 serving r1 (with an engine key) as `coder`; r2 is the same model on
    another port, the next switch's target."""
    host = HostFactory(name="lab", address="10.0.0.7", model_dirs=["/models"], ram_bytes=8 << 30)
    secret_set(host=host, name="api-key", value=ENGINE_KEY, actor=admin_user)
    variant = ModelVariant.objects.create(
        name="tiny-gguf", format="gguf", gguf_file="/models/tiny.gguf", weights_bytes=1 << 30, arch={"num_layers": 18}
    )

    def rev(port: int, **fields: Any) -> Any:
        return revision_create(
            host=host,
            engine="llama.cpp",
            model_variant=variant,
            served_name="tiny",
            port=port,
            knobs={"ctx_size": 8192, "parallel": 1, "n_gpu_layers": 0},
            message=f"on {port}",
            actor=operator,
            **fields,
        )

    r1 = rev(8001, api_key_secret="api-key")
    revision_mark_active(revision=r1, actor=operator)
    alias_set(host=host, name="coder", revision=r1, actor=operator)
    return {"host": host, 1: r1, 2: rev(8002)}


def _report(host: Host, bind: str = "0.0.0.0:4100") -> None:  # noqa: S104 - the door's bind, as reported
    front_door_report(host=host, version="v1", bind=bind, state=[], usage=[])


def _exports(revision: Any) -> dict[str, str]:
    return {target: revision_export(revision, target).content for target in CLIENTS}


def test_the_exports_name_the_front_door_and_the_alias_and_survive_a_switch(lab, operator):
    _report(lab["host"])
    before = _exports(lab[1])
    assert f'"baseURL": "{DOOR}"' in before["opencode"] and '"model": "selfhosted/coder"' in before["opencode"]
    assert f'base_url: "{DOOR}"' in before["hermes"] and 'default: "coder"' in before["hermes"]
    assert 'name: "openai/coder"' in before["aider-settings"] and '"openai/coder"' in before["aider-metadata"]
    for content in before.values():
        assert ":8001" not in content and "LLM_API_KEY" not in content and ENGINE_KEY not in content
    assert 'api_key: "EMPTY"' in before["hermes"]  # no inference key yet: the door is open
    revision_mark_active(revision=lab[2], actor=operator)  # the switch moves `coder` to r2
    assert _exports(lab[2]) == before
    left = revision_export(lab[1], "opencode")  # r1 left the door: at its engine, saying why
    assert "8001" in left.content and "does not serve r1" in left.notes[0]
    assert revision_export(lab[2], "opencode").notes == (
        "through lab's front door as the alias coder: a switch moves it",
    )


def test_with_inference_keys_the_configs_read_the_users_key_never_the_engines(lab, admin_user):
    _report(lab["host"])
    key_create(name="alice", actor=admin_user)
    made = _exports(lab[1])
    assert '"apiKey": "{env:CONTROLPANEL_KEY}"' in made["opencode"]
    assert 'api_key: "${CONTROLPANEL_KEY}"' in made["hermes"]
    target = revision_export_target(lab[1])
    assert target.via_door and "alias coder" in target.route


def test_without_a_door_report_they_keep_the_engine_url_and_the_page_says_why(lab, client, operator):
    made = _exports(lab[1])
    assert '"baseURL": "http://10.0.0.7:8001/v1"' in made["opencode"] and 'default: "tiny"' in made["hermes"]
    assert 'api_key: "${LLM_API_KEY}"' in made["hermes"]  # the engine's own key, as before
    client.force_login(operator)
    page = client.get("/hosts/lab/revisions/1/exports/").content.decode()
    assert "At the engine itself: lab&#x27;s front door has not reported" in page
    _report(lab["host"])
    page = client.get("/hosts/lab/revisions/1/exports/").content.decode()
    assert "Through lab&#x27;s front door as the alias coder" in page and DOOR in page


def test_a_door_on_loopback_or_a_revision_it_does_not_serve_keeps_the_engine_url(lab, operator):
    _report(lab["host"], bind="127.0.0.1:4000")
    assert "10.0.0.7:8001" in revision_export(lab[1], "hermes").content
    assert "CONTROLPANEL_FRONT_DOOR_BIND=0.0.0.0:4000" in revision_export_target(lab[1]).route
    _report(lab["host"], bind="")  # no bind in the report: the door's default port
    assert "http://10.0.0.7:4000/v1" in revision_export(lab[1], "hermes").content
    assert "not in its serving set" in revision_export_target(lab[2]).route
    serving_mode_set(revision=lab[2], mode="on-demand", actor=operator)
    assert 'default: "tiny-r2"' in revision_export(lab[2], "hermes").content  # its own name, no alias yet


def test_a_remote_host_without_an_address_is_still_refused(lab):
    _report(lab["host"])
    lab[1].host.address = "127.0.0.1"
    lab[1].host.save()
    with pytest.raises(NotExportable, match="lab's address is 127.0.0.1"):
        revision_export(lab[1], "opencode")

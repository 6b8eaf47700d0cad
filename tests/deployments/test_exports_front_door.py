"""Client exports through the host's front door (issue 27, Aliases): opencode, Hermes and aider
name the door and the revision's alias, so the config a user saved survives every switch; the key
is the user's inference key, never the engine's; without a door report they keep the engine's
own URL and the page says why. With a lab router (CONTROLPANEL_ROUTER_URL) they name the router
and the same alias, by default when clients can reach it; the host's door stays a choice."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from deployments.models import ModelVariant
from deployments.services.aliases import alias_set
from deployments.services.exports import revision_export, revision_export_target
from deployments.services.front_door import front_door_report
from deployments.services.inference_keys import key_create
from deployments.services.revisions import revision_mark_active
from deployments.services.secrets import secret_set
from deployments.services.serving_set import serving_mode_set
from hardware.models import Host
from serving.exports import NotExportable
from tests.api.test_api import _token, call
from tests.hardware.factories import HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db
CLIENTS = ("opencode", "hermes", "aider-settings", "aider-metadata", "claude-code", "codex")
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
        return make_revision(
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
    with pytest.raises(NotExportable, match="lab's address: 127.0.0.1 is a loopback address"):
        revision_export(lab[1], "opencode")


# --- through the lab router (issue 27, one URL for the lab) ---------------------------------------

ROUTER = "https://llm.lab.example"


def test_with_a_lab_router_the_configs_name_it_and_the_alias_and_the_hosts_door_stays_a_choice(
    lab, settings, client, operator
):
    settings.ROUTER_URL = ROUTER
    _report(lab["host"])
    made = _exports(lab[1])  # the default: the router, as clients can reach it
    assert f'"baseURL": "{ROUTER}/v1"' in made["opencode"] and '"model": "selfhosted/coder"' in made["opencode"]
    assert f'base_url: "{ROUTER}/v1"' in made["hermes"] and 'default: "coder"' in made["hermes"]
    assert 'name: "openai/coder"' in made["aider-settings"]
    assert all(DOOR not in content and ENGINE_KEY not in content for content in made.values())
    note = revision_export(lab[1], "hermes").notes[0]
    assert note.startswith("through the lab router as coder: one URL for the lab, to whichever host serves coder")
    assert note.endswith("here lab's front door as the alias coder: a switch moves it")
    door = _exports_via(lab[1], "door")
    assert f'base_url: "{DOOR}"' in door["hermes"] and 'default: "coder"' in door["hermes"]

    client.force_login(operator)
    page = client.get("/hosts/lab/revisions/1/exports/").content.decode()
    assert 'Configs through: <strong>the lab router</strong> · <a href="?via=door">lab\'s front door</a>' in page
    assert f"<tr><th>Base URL</th><td><code>{ROUTER}/v1</code></td></tr>" in page
    assert f"<th>Host's front door</th><td><code>{DOOR}</code> with the same name" in page
    assert 'href="?via=router&amp;download=hermes"' in page
    by_door = client.get("/hosts/lab/revisions/1/exports/?via=door").content.decode()
    assert f"<tr><th>Base URL</th><td><code>{DOOR}</code></td></tr>" in by_door
    assert 'href="?via=door&amp;download=opencode"' in by_door and f"<code>{ROUTER}/v1</code> with the same" in by_door
    # The download follows the choice, and so does the API.
    assert DOOR in client.get("/hosts/lab/revisions/1/exports/?via=door&download=hermes").content.decode()
    assert f"{ROUTER}/v1" in client.get("/hosts/lab/revisions/1/exports/?download=hermes").content.decode()
    token = _token(operator)
    api = "/api/v1/hosts/lab/revisions/1/exports/opencode/"
    assert f'"baseURL": "{ROUTER}/v1"' in call(client, "GET", api, token).json()["content"]
    by_api = call(client, "GET", api + "?via=door", token).json()
    assert f'"baseURL": "{DOOR}"' in by_api["content"] and by_api["notes"][0].startswith("through lab's front door")
    assert call(client, "GET", api + "?via=elsewhere", token).status_code == 400


def test_a_router_url_on_loopback_is_no_default_for_a_remote_host_and_says_why(lab, settings, client, operator):
    settings.ROUTER_URL = "http://127.0.0.1:4100"  # the default for CONTROLPANEL_ROUTER_BIND=127.0.0.1:4100
    _report(lab["host"])
    assert f'base_url: "{DOOR}"' in revision_export(lab[1], "hermes").content  # the door, reachable
    with pytest.raises(
        NotExportable, match="the lab router's URL is http://127.0.0.1:4100, where 127.0.0.1 is a loopback address"
    ):
        revision_export(lab[1], "hermes", via="router")
    client.force_login(operator)
    page = client.get("/hosts/lab/revisions/1/exports/").content.decode()
    assert 'Configs through: <a href="?via=router">the lab router</a> · <strong>lab\'s front door</strong>' in page
    assert "but the lab router&#x27;s URL is http://127.0.0.1:4100" in page and "CONTROLPANEL_ROUTER_URL" in page


def test_no_router_or_a_door_it_cannot_reach_keeps_the_door_and_says_why(lab, settings, client, operator):
    _report(lab["host"])
    settings.ROUTER_URL = ""  # CONTROLPANEL_ROUTER_BIND=off and no URL
    made = revision_export(lab[1], "aider-metadata", via="router")
    assert (
        made.notes[1]
        == "not through the lab router: there is none (CONTROLPANEL_ROUTER_BIND=off, no CONTROLPANEL_ROUTER_URL)"
    )
    client.force_login(operator)
    page = client.get("/hosts/lab/revisions/1/exports/?via=router").content.decode()
    assert 'id="export-via"' not in page and 'id="lab-router"' not in page and DOOR in page

    settings.ROUTER_URL = ROUTER
    lab[1].host.address = "127.0.0.1"  # another machine at loopback: the router would reach itself too
    lab[1].host.save()
    made = revision_export(lab[1], "aider-metadata", via="router")
    assert any(
        note.startswith("not through the lab router: the router cannot reach lab's front door either")
        for note in made.notes
    )  # beside the warning that a loopback URL works on the panel's machine only
    page = client.get("/hosts/lab/revisions/1/exports/").content.decode()
    assert 'id="export-via"' not in page and "not for these configs: the router cannot reach lab&#x27;s" in page


def _exports_via(revision: Any, via: str) -> dict[str, str]:
    return {target: revision_export(revision, target, via).content for target in CLIENTS}

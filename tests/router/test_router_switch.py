"""A switch behind the lab router under the official clients' streams (issue 40): an Anthropic
Messages stream and an OpenAI Responses stream run through the router to a host's front door by
the alias `fast` when a switch makes another revision active (the panel moves `fast`, the door gets
the panel's new table). Both streams finish whole on the engine they began on, the next requests by
`fast` through the router reach the new revision, and the door books every token to the key.

The door runs in this process (tests/hostagent/frontdoor/conftest.py, its table updated as the
agent updates it), two real llama-servers behind it; the router in its own process."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from openai import OpenAI

from bench.bench_frontdoor import engine_argv
from deployments.models import ModelVariant
from deployments.services.aliases import alias_set
from deployments.services.front_door import front_door_document
from deployments.services.inference_keys import key_create
from deployments.services.revisions import revision_mark_active
from deployments.services.serving_set import serving_mode_set
from hostagent.door.tables import serving_set
from hostagent.frontdoor import FrontDoorSettings, KeyTable, RoutingTable
from hostagent.frontdoor.launcher import Command, ProcessLoader
from tests.hardware.factories import HostFactory
from tests.hostagent.frontdoor.conftest import DoorThread, Host
from tests.support.llama import GEMMA_PURPOSE, free_port, gemma_model_path
from tests.support.revisions import make_revision

from .conftest import lab_address, report, router_process

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]
SAY = [{"role": "user", "content": "Count to ten."}]
PLAIN = {"ignore_eos": True}
LONG = 200  # tokens each stream runs for while the switch comes


def door_table(document: dict[str, Any]) -> RoutingTable:
    """The routing table the host's agent makes of the panel's document (hostagent.door.tables)."""
    return serving_set(document, bind_host="127.0.0.1").table


def test_a_switch_behind_the_router_under_both_clients_streams_loses_nothing(
    operator: User, admin_user: User, tmp_path: Path
) -> None:
    model = gemma_model_path()
    variant = ModelVariant.objects.create(
        name="gemma-3-270m", format="gguf", gguf_file=model, quantization="Q4_K_M", purpose=GEMMA_PURPOSE,
        arch={"architecture": "gemma3", "num_layers": 18},
    )  # fmt: skip
    _, key = key_create(name="alice", models=None, actor=admin_user)
    host = HostFactory(name="lab-c", address=lab_address(), model_dirs=[str(Path(model).parent)])
    r1, r2 = (
        make_revision(
            host=host,
            engine="llama.cpp",
            model_variant=variant,
            served_name=name,
            port=free_port(),
            knobs={"ctx_size": 1024, "parallel": 2, "n_gpu_layers": 0, "threads": 1},
            message=name,
            actor=operator,
        )  # fmt: skip
        for name in ("gemma-one", "gemma-two")
    )
    revision_mark_active(revision=r1, actor=operator)
    serving_mode_set(revision=r2, mode="on-demand", actor=operator)  # the switch's target, known to the door
    alias_set(host=host, name="fast", revision=r1, actor=operator)
    document = front_door_document(host).to_dict()
    engines = Host()
    for revision, served in ((r1, "gemma-one"), (r2, "gemma-two")):
        argv = engine_argv(revision.port, context=1024, slots=2, threads=1, name=served)
        name = next(m.name for m in door_table(document).models if m.upstream.endswith(f":{revision.port}"))
        engines.commands[name] = Command(tuple(argv), f"http://127.0.0.1:{revision.port}/health")
    engines.models = {m.name: m for m in door_table(document).models}
    loader = ProcessLoader(engines.commands, log_dir=tmp_path, ready_timeout=180.0)
    settings = FrontDoorSettings(host="0.0.0.0", port=0, queue_wait_s=300.0, drain_timeout_s=120.0)  # noqa: S104
    door = DoorThread(engines, loader, settings, KeyTable.from_dict(document["keys"]), loader)
    try:
        report(host, door, document["version"])  # type: ignore[arg-type]  # a door in this process
        host.last_heartbeat = timezone.now()
        host.save(update_fields=["last_heartbeat"])
        with router_process(tmp_path / "router.log", usable=1) as router:
            claude = anthropic.Anthropic(base_url=router, api_key=key, max_retries=0, timeout=300)
            responses = OpenAI(base_url=f"{router}/v1", api_key=key, max_retries=0, timeout=300)
            assert claude.messages.create(model="fast", max_tokens=1, messages=SAY).model == "gemma-one"
            done: dict[str, tuple[str, int]] = {}
            failures: list[BaseException] = []

            def messages_stream() -> None:
                try:
                    with claude.messages.stream(model="fast", max_tokens=LONG, messages=SAY, extra_body=PLAIN) as s:
                        pieces = sum(1 for _ in s.text_stream)
                        done["messages"] = (s.get_final_message().model, pieces)
                except BaseException as exc:  # noqa: BLE001 - handed to the test
                    failures.append(exc)

            def responses_stream() -> None:
                try:
                    seen = list(
                        responses.responses.create(
                            model="fast", input="Count.", max_output_tokens=LONG, stream=True, extra_body=PLAIN
                        )
                    )
                    deltas = sum(1 for event in seen if event.type == "response.output_text.delta")
                    assert seen[-1].type == "response.completed"
                    done["responses"] = (seen[-1].response.model, deltas)
                except BaseException as exc:  # noqa: BLE001 - handed to the test
                    failures.append(exc)

            threads = [threading.Thread(target=messages_stream), threading.Thread(target=responses_stream)]
            for thread in threads:
                thread.start()
            one = document["models"][0]["name"]
            door.wait_for(lambda state: state[one]["in_flight"] == 2)
            revision_mark_active(revision=r2, actor=operator)  # the switch: `fast` moves to r2
            switched = front_door_document(host).to_dict()
            door.update_table(door_table(switched))  # what the agent does with the panel's new table
            assert all(thread.is_alive() for thread in threads)  # the switch came while both streamed
            for thread in threads:
                thread.join(300)
            assert failures == [] and done == {"messages": ("gemma-one", LONG), "responses": ("gemma-one", LONG)}
            assert claude.messages.create(model="fast", max_tokens=2, messages=SAY).model == "gemma-two"
            assert responses.responses.create(model="fast", input="Hi.", max_output_tokens=2).model == "gemma-two"
            rows = {r["model"]: r for r in httpx.get(f"{door.url}/frontdoor/usage", timeout=10).json()["usage"]}
            assert rows[one]["completion_tokens"] == 1 + 2 * LONG and rows[one]["errors"] == 0
    finally:
        door.close()

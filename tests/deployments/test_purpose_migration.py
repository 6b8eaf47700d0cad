"""A panel upgraded to the model's purpose (deployments 0021_modelvariant_purpose): its catalog models
are for chat, the strict gate, but where their names mark a base model ("-Base", "-pt"), which are
for completions, so their next switch tests a completion (serving.purpose)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)
BEFORE = [("deployments", "0020_modelvariant_chat_template_tools")]
AFTER = [("deployments", "0021_modelvariant_purpose")]


def _apps(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state(targets).apps


def test_models_named_as_base_models_come_up_for_completions_the_rest_for_chat() -> None:
    try:
        old = _apps(BEFORE)
        variants = old.get_model("deployments", "ModelVariant").objects
        variants.create(name="qwen-base", repo_id="Qwen/Qwen3-8B-Base")
        variants.create(name="gemma-pt", format="gguf", gguf_file="/srv/models/gemma-3-1b-pt-Q8_0.gguf")
        variants.create(name="gemma-it", format="gguf", gguf_file="/srv/models/gemma-3-1b-it-Q8_0.gguf")
        variants.create(name="Qwen3-8B-AWQ", repo_id="Qwen/Qwen3-8B-AWQ")
        new = _apps(AFTER)
        purposes = dict(new.get_model("deployments", "ModelVariant").objects.values_list("name", "purpose"))
        assert purposes == {
            "qwen-base": "completions",
            "gemma-pt": "completions",
            "gemma-it": "chat",
            "Qwen3-8B-AWQ": "chat",
        }
    finally:
        _apps(MigrationExecutor(connection).loader.graph.leaf_nodes())


def test_a_model_the_old_agent_warned_was_answering_with_the_question_comes_up_for_completions() -> None:
    """Named like a chat model, but its switch served with the old agent's warning (`chat_warning`: the
    test chat answered with the question itself, a base model): completions, so the restore of that
    revision or a rollback to it passes the new gate. A model switched to without the warning stays chat."""
    try:
        old = _apps(BEFORE)
        variants = old.get_model("deployments", "ModelVariant").objects
        host = old.get_model("hardware", "Host").objects.create(name="alpha", queue="host.alpha")
        revisions = old.get_model("deployments", "DeploymentRevision").objects
        operations = old.get_model("deployments", "Operation").objects
        warned = "the test chat was answered with the question itself ('Say hello in one word.'): ..."
        for number, (name, result) in enumerate(
            [
                ("gemma-3-270m", {"revision": 1, "chat_warning": warned}),
                ("Qwen3-8B", {"revision": 2, "previous": 1}),
            ],
            start=1,
        ):
            variant = variants.create(name=name, format="gguf", gguf_file=f"/srv/models/{name}-Q8_0.gguf")
            revision = revisions.create(
                host=host, number=number, engine="llama.cpp", model_variant=variant, message=f"serve {name}"
            )
            operations.create(kind="switch", host=host, revision=revision, state="succeeded", result=result)
        new = _apps(AFTER)
        purposes = dict(new.get_model("deployments", "ModelVariant").objects.values_list("name", "purpose"))
        assert purposes == {"gemma-3-270m": "completions", "Qwen3-8B": "chat"}
    finally:
        _apps(MigrationExecutor(connection).loader.graph.leaf_nodes())

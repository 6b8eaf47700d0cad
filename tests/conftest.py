"""Shared fixtures. Tests run against real PostgreSQL and Redis (the test command sets
DATABASE_URL and CELERY_BROKER_URL); see docs/development.md."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.test import override_settings

from deployments.services.catalog import catalog_load
from tests.support.revisions import make_revision


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing() -> Iterator[None]:
    """Passwords made and checked in the test process are hashed with MD5, as Django advises for
    tests: the panel's PBKDF2 costs a quarter of a second a password on this machine, paid by every
    test that makes a user (three roles, most tests). PBKDF2 stays in the list, so a hash a panel
    wrote still verifies; the panels the suite runs as processes of their own keep their hashers."""
    with override_settings(
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher", *settings.PASSWORD_HASHERS]
    ):
        yield


def _user(username: str, role: str | None) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username)
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


@pytest.fixture
def viewer(db: Any) -> User:
    return _user("vera", "viewer")


@pytest.fixture
def operator(db: Any) -> User:
    return _user("otto", "operator")


@pytest.fixture
def admin_user(db: Any) -> User:
    return _user("ada", "admin")


@pytest.fixture
def catalog(db: Any) -> None:
    catalog_load()


@pytest.fixture
def lab(
    tmp_path: Any, catalog: None, operator: User, settings: Any, live_server: Any, request: pytest.FixtureRequest
) -> Any:
    """A real host agent (Celery worker on its own queue, real Redis) for a fresh host, with a
    real Gemma 3 270M model variant and a helper that records llama.cpp revisions of it.

    The agent runs as a GPU host runs it: no database URL and no secret key, only the broker,
    the panel's URL (the live server) and the host token an admin issued. Parametrize it
    indirectly with a dict to add variables to the agent's environment."""
    import uuid

    from deployments.models import ModelVariant
    from hardware.credentials import host_token_issue
    from hardware.models import Host
    from hostagent.local import supervisor_for
    from tests.support.agent import AgentProcess
    from tests.support.llama import GEMMA_PURPOSE, free_port, gemma_model_path

    name = f"lab-{uuid.uuid4().hex[:8]}"
    state = tmp_path / "state"
    settings.HOST_STATE_DIR = state
    _host, token = host_token_issue(name=name, actor=None)
    extra_env = getattr(request, "param", None)
    agent = AgentProcess(
        name, state, tmp_path / "agent.log", panel_url=live_server.url, token=token, extra_env=extra_env
    )
    agent.start()
    world: dict[str, Any] = {"agent": agent, "tmp": tmp_path}
    try:
        agent.wait_registered()
        host = Host.objects.get(name=name)
        gemma = ModelVariant.objects.create(
            name=f"gemma-3-270m-{name}",
            format="gguf",
            gguf_file=gemma_model_path(),
            purpose=GEMMA_PURPOSE,  # the base model, served for completions
            quantization="Q4_K_M",
            arch={"architecture": "gemma3", "num_layers": 18},
        )
        port = free_port()

        def rev(
            message: str, ctx: int, model: ModelVariant = gemma, fields: dict[str, Any] | None = None, **knobs: Any
        ) -> Any:
            """A llama.cpp revision of `model` with these knobs; `fields`: more of make_revision's
            arguments (api_key_secret=..., env=...)."""
            return make_revision(
                host=host,
                engine="llama.cpp",
                model_variant=model,
                served_name="gemma",
                port=port,
                knobs={"ctx_size": ctx, "parallel": 1, "n_gpu_layers": 0, **knobs},
                message=message,
                actor=operator,
                **(fields or {}),
            )

        world.update(host=host, rev=rev, port=port, gemma=gemma)
        yield world
    finally:
        world["agent"].stop()
        supervisor_for(name).stop(grace=5)

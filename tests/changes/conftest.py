"""A protected host for the change-request tests: CPU-only, 8 GiB of RAM, small GGUF revisions
r1 (active), r2 and r3 on their own ports; an author (otto, operator), a reviewer (olga,
operator), a viewer (vera) and an admin (ada)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from changes.services import host_review_set
from deployments.models import ModelVariant
from deployments.services.revisions import revision_mark_active
from hardware.credentials import host_token_issue
from tests.support.revisions import make_revision

GiB = 1 << 30


@pytest.fixture
def reviewer(db: Any) -> User:
    user = User.objects.create_user(username="olga", password="pw-olga")
    user.groups.add(Group.objects.get_or_create(name="operator")[0])
    return user


@pytest.fixture
def protected(db: Any, admin_user: User, operator: User) -> dict[str, Any]:
    host, _token = host_token_issue(name="guarded", actor=admin_user)
    host.ram_bytes, host.model_dirs = 8 * GiB, ["/models"]
    host.save()
    small = ModelVariant.objects.create(
        name="tiny-gguf",
        format="gguf",
        gguf_file="/models/tiny.gguf",
        weights_bytes=GiB,
        arch={"architecture": "gemma3", "num_layers": 18},
    )

    def rev(port: int, ctx: int = 2048) -> Any:
        return make_revision(
            host=host,
            engine="llama.cpp",
            model_variant=small,
            served_name="tiny",
            port=port,
            knobs={"ctx_size": ctx, "parallel": 1, "n_gpu_layers": 0},
            message=f"on {port}",
            actor=operator,
        )

    r1 = rev(8001)
    revision_mark_active(revision=r1, actor=operator)
    r2, r3 = rev(8002, 4096), rev(8003)
    host_review_set(host=host, required=True, actor=admin_user)
    return {"host": host, "r": {1: r1, 2: r2, 3: r3}}

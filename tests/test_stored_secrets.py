"""What a host reports is stored and shown masked (issue 24): an operation's log and error, and
engine log lines, carry no credential into the database, the audit trail or a page, whatever the
agent did or did not mask (an agent of an older version, a message from a library it does not
know). Driven over the agent API with a real host token, real PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core.models import AuditEvent
from deployments.choices import OperationKind
from deployments.models import EngineLogRun, ModelVariant, Operation
from deployments.services.operations import operation_create
from hardware.credentials import host_token_issue
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db

SECRETS = ["HubPass123", "cpat_Zx9Lm2Qp7Rt4Vw8Yb3Nc6Df1Gh5", "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw", "s3cr3t-Key-42"]
REPORT = (
    "download from https://ops:HubPass123@hub.lab.example/Qwen/Qwen3-8B failed; "
    "the panel answered 401 to Authorization: Bearer cpat_Zx9Lm2Qp7Rt4Vw8Yb3Nc6Df1Gh5; "
    "webhook tgram://123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/-100123 unreachable; "
    "engine args: api_key='s3cr3t-Key-42'"
)


def _post(token: str, path: str, body: dict[str, Any]) -> Any:
    response = Client().post(
        f"/agent/v1/{path}",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert response.status_code == 200, response.content
    return response.json()


def _left(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_an_operations_reported_log_and_error_are_stored_and_shown_masked(
    catalog: None, admin_user: User, operator: User
) -> None:
    host, token = host_token_issue(name="gpu-box-1", actor=admin_user)
    variant = ModelVariant.objects.get(name="Qwen3.5-27B")
    revision = make_revision(host=host, engine="vllm", model_variant=variant, message="r1", actor=operator)
    op = operation_create(kind=OperationKind.SWITCH, host=host, revision=revision, actor=operator)
    _post(token, f"operations/{op.pk}/begin", {"worker": "agent@gpu-box-1"})
    _post(token, f"operations/{op.pk}/progress", {"stage": "loading", "log": REPORT})
    assert _post(token, f"operations/{op.pk}/finish", {"state": "failed", "error": REPORT}) == {"recorded": True}

    stored = Operation.objects.get(pk=op.pk)
    assert stored.state == "failed" and "hub.lab.example" in stored.error and "********" in stored.error
    assert _left(stored.error) == [] and _left(stored.log) == []
    audit = " ".join(AuditEvent.objects.values_list("summary", flat=True))
    assert "failed" in audit and _left(audit) == []
    client = Client()
    client.force_login(operator)
    page = client.get(f"/operations/{op.pk}/").content.decode()
    assert "hub.lab.example" in page and _left(page) == []


def test_engine_log_lines_are_stored_masked(catalog: None, admin_user: User) -> None:
    _host, token = host_token_issue(name="gpu-box-1", actor=admin_user)
    run = {"key": "2026-12-03T07:00:00+00:00|4242", "engine": "vllm", "started_at": "2026-12-03T07:00:00+00:00"}
    lines = ["INFO starting", REPORT]
    _post(token, "engine-log", {"run": run, "offset": 0, "end": sum(len(x) + 1 for x in lines), "lines": lines})
    text = EngineLogRun.objects.get().text
    assert "INFO starting" in text and "hub.lab.example" in text and _left(text) == []


def test_the_panels_own_tokens_are_masked_by_their_shape(admin_user: User) -> None:
    from api.tokens import token_create
    from core.secrets_mask import mask_text

    _host, host_token = host_token_issue(name="gpu-box-1", actor=admin_user)
    api_token = token_create(user=admin_user, name="ci", actor=admin_user).secret
    for token in (host_token, api_token):
        for line in (f"GET /agent/v1/operations Authorization: Bearer {token}", f"the token {token} was refused"):
            said = mask_text(line)
            assert token not in said and token[:12] not in said, said

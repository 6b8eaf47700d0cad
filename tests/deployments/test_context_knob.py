"""A vLLM context knob is read once, as vLLM reads it (issue 25): `32k` (32,000), `32K` (32,768),
`auto` and `-1` are accepted and give the same context to the agent's order, the planner, the
diff and the client exports; garbage, `0` and `1.5K` are refused when the revision is created,
with vLLM's own reason, never at the host."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from deployments.host_serving import revision_launch
from deployments.models import DeploymentRevision, ModelVariant
from deployments.planning import revision_plan
from deployments.selectors.revision_views import revision_view
from deployments.services.exports import revision_client_target
from serving.diffing.context import revision_context
from tests.hardware.factories import HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db


@pytest.fixture
def host(catalog):
    return HostFactory(name="ctx", address="gpu-ctx.lan", model_dirs=["/srv/models"])


@pytest.fixture
def qwen(catalog):
    return ModelVariant.objects.get(name="Qwen3-32B-AWQ")


def _create(host, operator, model, value):
    return make_revision(
        host=host,
        actor=operator,
        engine="vllm",
        model_variant=model,
        message=f"context {value!r}",
        knobs={"max_model_len": value},
    )


@pytest.mark.parametrize(
    ("value", "tokens"),
    [("32k", 32_000), ("32K", 32_768), ("25.6k", 25_600), (8192, 8192), ("8192", 8192), ("auto", None), (-1, None)],
)
def test_each_accepted_spelling_gives_one_context_everywhere(host, qwen, operator, value, tokens):
    revision = _create(host, operator, qwen, value)
    order = revision_launch(revision, host_bound=True)  # the agent's order: was int("32k"), a 500 at the host
    page = revision_context(revision_view(revision))
    export = revision_client_target(revision).context
    report = revision_plan(revision).checked()
    if tokens is None:
        # auto: vLLM picks the largest that fits at start. The pages and exports show the
        # planner's estimate of it (never -1); the agent's benchmark asks the running server.
        assert order.served_context is None
        assert page.per_sequence == export.per_sequence == report.max_model_len
        assert export.per_sequence is not None and export.per_sequence > 0
    else:
        assert order.served_context == page.per_sequence == export.per_sequence == tokens
        assert report.max_model_len == tokens


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (
            "1.5K",
            "argument --max-model-len: Decimals are not allowed with binary suffixes like K. "
            "Did you mean to use 1.5k instead?",
        ),
        ("garbage", "must be a positive number of tokens"),
        ("0", "must be a positive number of tokens"),
        ("-2", "must be a positive number of tokens"),
        ("1e5", "must be a positive number of tokens"),
    ],
)
def test_a_spelling_vllm_refuses_is_refused_when_the_revision_is_made(host, qwen, operator, value, said):
    with pytest.raises(ValidationError) as exc:
        _create(host, operator, qwen, value)
    assert said in " ".join(exc.value.message_dict.get("max_model_len", exc.value.messages))
    assert not DeploymentRevision.objects.filter(host=host).exists()

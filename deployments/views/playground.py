"""The revision page's chat playground: one POST per message, answered as Server-Sent Events
that deployments.services.playground relays from the engine (static/js/playground.js reads them).

Refusals answer JSON `{"error": ...}` before any stream: 400 bad input, 403 not an operator
(the role check), 409 the host does not serve this revision now. Once the stream has begun,
anything that goes wrong arrives as an `error` event."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path
from django.views.decorators.http import require_POST

from controlpanel.roles import OPERATOR, has_role, role_required
from deployments.forms import PlaygroundForm
from deployments.models import DeploymentRevision
from deployments.services.playground import ChatRequest, PlaygroundUnavailable, playground_chat, playground_state

from .lookups import revision_or_404


def playground_context(request: HttpRequest, revision: DeploymentRevision) -> dict[str, Any]:
    """The revision page's playground box: whether it can be tried and, for an operator, the form
    with the revision's sampling filled in."""
    can_send = has_role(request.user, OPERATOR)
    state = playground_state(revision, with_defaults=can_send)
    form = None
    if state.available and state.defaults is not None:
        d = state.defaults
        form = PlaygroundForm(initial={"temperature": d.temperature, "top_p": d.top_p, "max_tokens": d.max_tokens})
        if d.max_tokens_limit:
            form.fields["max_tokens"].widget.attrs["max"] = d.max_tokens_limit
    return {"playground": state, "playground_form": form}


def _form_errors(form: PlaygroundForm) -> str:
    return " ".join(
        f"{form.fields[k].label or k}: {m}" if k in form.fields and k != "history" else m
        for k, messages in form.errors.items()
        for m in messages
    )


@require_POST
@role_required(OPERATOR)
def revision_chat(request: HttpRequest, host: str, number: int) -> HttpResponse:
    revision = revision_or_404(host, number)
    form = PlaygroundForm(request.POST)
    if not form.is_valid():
        return JsonResponse({"error": _form_errors(form)}, status=400)
    data = form.cleaned_data
    chat = ChatRequest(
        messages=form.messages(),
        system=data["system"],
        temperature=data["temperature"],
        top_p=data["top_p"],
        max_tokens=data["max_tokens"],
    )
    try:
        events = playground_chat(revision=revision, chat=chat, actor=request.user)
    except PlaygroundUnavailable as exc:
        return JsonResponse({"error": str(exc)}, status=409)
    except ValidationError as exc:
        return JsonResponse({"error": " ".join(exc.messages)}, status=400)
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a proxy in front (nginx) passes each event on at once
    return response


urlpatterns = [
    path("hosts/<slug:host>/revisions/<int:number>/chat/", revision_chat, name="revision_chat"),
]

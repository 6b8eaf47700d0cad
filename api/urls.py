from django.http import HttpRequest, JsonResponse
from django.urls import path, re_path

from .core import api


def unknown(request: HttpRequest, rest: str = "") -> JsonResponse:
    """Any other path under /api/v1/ answers in JSON too (scripts parse every answer)."""
    return JsonResponse({"detail": "No such API endpoint: see /api/v1/openapi.json."}, status=404)


urlpatterns = [path("", api.urls), re_path(r"^(?P<rest>.*)$", unknown)]

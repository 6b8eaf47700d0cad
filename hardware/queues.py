"""Host names and Celery queue names: one queue per GPU host; control-plane work goes to `default`."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.utils.text import slugify

DEFAULT_QUEUE = "default"


def host_queue_name(host_name: str) -> str:
    return f"host.{slugify(host_name)}"


def host_slug(name: str) -> str:
    """The host name `name`, as a person typed it, gives (a slug, as Host.name and its queue
    take it); ValidationError on `name` when nothing of it is left."""
    slug = slugify(name)
    if not slug:
        raise ValidationError({"name": "A host needs a name made of letters, digits or dashes."})
    return slug

"""The lab router's route table from the database (serving.lab_routes.LabRoutes): every host
whose front door has reported, the names and aliases it serves (deployments.host_serving's
door_set and door_labels: what the panel sends the door), the models loaded at its last report, where the router
reaches it (services.front_door.door_base_url, as client exports do, at the address the one
loopback rule judged: services.exports.host_reach, pinned so a name cannot resolve elsewhere when
the router connects), whether it may be used now, and the inference keys every door gets
(services.inference_keys.key_table)."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlsplit

from django.conf import settings
from django.utils import timezone

from deployments.host_serving import door_labels, door_set
from deployments.models import FrontDoor
from deployments.services.exports import host_reach
from deployments.services.front_door import door_base_url
from deployments.services.inference_keys import key_table
from hardware.models import Host
from serving.exports import base_url_for
from serving.lab_routes import Door, LabRoutes, door_problem

__all__ = ["lab_routes"]


def _age(at: datetime | None, now: datetime) -> float | None:
    return None if at is None else (now - at).total_seconds()


def _pinned(host: Host, url: str) -> tuple[str, str]:
    """The door's root at the address the router connects to (the host's address as judged, an IP
    literal), or "" and why the router may not connect."""
    reach = host_reach(host)
    if reach.why:
        return "", reach.why
    if not reach.ips:
        return "", f"{host.name}'s address {host.address} does not resolve on the panel's machine"
    return base_url_for(reach.ips[0], urlsplit(url).port or 80).removesuffix("/v1"), ""


def lab_routes() -> LabRoutes:
    now = timezone.now()
    doors = list(FrontDoor.objects.filter(reported_at__isnull=False).select_related("host").order_by("host__name"))
    found = []
    for door in doors:
        host = door.host
        kept = door_set(host)[0]  # what the door's document serves (deployments.host_serving)
        names = {served.revision.pk: served.name for served in kept}
        labels = {name: name for name in names.values()}
        labels |= {alias: names[pk] for pk, aliases in door_labels(host, kept).items() for alias in aliases}
        url, unreachable = door_base_url(host, door)
        if url and not unreachable:
            url, unreachable = _pinned(host, url)
        problem = door_problem(
            heartbeat_age_s=_age(host.last_heartbeat, now),
            report_age_s=_age(door.reported_at, now),
            offline_after_s=settings.HOST_OFFLINE_AFTER_S,
            stale_after_s=settings.ROUTER_STALE_S,
        )
        loaded = frozenset(
            str(row.get("name")) for row in door.state if isinstance(row, dict) and row.get("phase") == "loaded"
        )
        found.append(
            Door(
                host=host.name,
                url=url.removesuffix("/v1"),
                labels=labels,
                loaded=loaded,
                problem=problem or unreachable,
            )
        )
    return LabRoutes(tuple(found), key_table())

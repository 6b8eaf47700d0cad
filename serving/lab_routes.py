"""The lab router's route table: which hosts' front doors serve which names and aliases, where
each door is reached, and whether it may be used now. Pure data (no Django, no I/O): the panel's
service (deployments/services/lab_routes.py) builds it from the database, the router
(labrouter/) reads it for every request.

A door may be used when its host is online (an agent heartbeat within the offline threshold),
its last report is fresh (within the stale threshold) and other machines can reach its bind
address; `Door.problem` says why not, decided when the table is read. Among the doors that serve
a name, those that have it loaded come first, so a request does not make a second host load a
model one host already has up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Door", "LabRoutes", "Route", "door_problem"]


def door_problem(
    *, heartbeat_age_s: float | None, report_age_s: float | None, offline_after_s: float, stale_after_s: float
) -> str:
    """Why a door may not be used now ("" when it may), from its host's heartbeat and its last
    report, each as seconds ago (None: never)."""
    if heartbeat_age_s is None or heartbeat_age_s >= offline_after_s:
        return "its host is offline"
    if report_age_s is None:
        return "its front door has not reported"
    if report_age_s >= stale_after_s:
        return f"its front door's last report is {report_age_s:.0f} s old"
    return ""


@dataclass(frozen=True)
class Door:
    """One host's front door as the router sees it."""

    host: str
    url: str  # its root, "http://10.0.0.7:4000" ("" when other machines cannot reach it)
    labels: Mapping[str, str] = field(default_factory=dict)  # name or alias -> the served model's name
    loaded: frozenset[str] = frozenset()  # model names loaded at its last report
    problem: str = ""  # why it may not be used ("" when it may)

    @property
    def usable(self) -> bool:
        return not self.problem and bool(self.url)


@dataclass(frozen=True)
class Route:
    """One door that serves a requested name: the model it resolves to there."""

    door: Door
    model: str

    @property
    def loaded(self) -> bool:
        return self.model in self.door.loaded


@dataclass(frozen=True)
class LabRoutes:
    doors: tuple[Door, ...] = ()
    keys: Mapping[str, Any] = field(default_factory=lambda: {"keys": []})  # the doors' key table

    def known(self, label: str) -> bool:
        """Some door serves `label`, usable or not."""
        return any(label in door.labels for door in self.doors)

    def routes(self, label: str, *, usable: bool = True) -> list[Route]:
        """The doors that serve `label` (only those that may be used now, unless `usable` is
        False), those with its model loaded first."""
        found = [
            Route(door, door.labels[label])
            for door in self.doors
            if label in door.labels and (door.usable or not usable)
        ]
        return sorted(found, key=lambda route: not route.loaded)

    def unusable(self, label: str) -> list[str]:
        """`host: why` for each door that serves `label` but may not be used now."""
        return [
            f"{door.host}: {door.problem or 'other machines cannot reach its front door'}"
            for door in self.doors
            if not door.usable and label in door.labels
        ]

    def models(self) -> dict[str, list[Route]]:
        """Each name or alias some usable door serves, with its routes (for /v1/models)."""
        out: dict[str, list[Route]] = {}
        for door in self.doors:
            if door.usable:
                for label, model in door.labels.items():
                    out.setdefault(label, []).append(Route(door, model))
        return dict(sorted(out.items()))

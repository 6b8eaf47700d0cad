"""hostagent/PROTOCOL.md's table of the wire's types says exactly the fields serving/wire.py sends:
an agent written from the document reads every field the panel sends, and none it does not."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from serving import wire
from serving.host_events import HostEventReport

PROTOCOL = Path(__file__).resolve().parents[1] / "hostagent" / "PROTOCOL.md"
ROW = re.compile(r"^\| `(\w+)` \| ((?:`\w+`(?:, )?)+) \|$", re.MULTILINE)


def documented() -> dict[str, list[str]]:
    return {name: re.findall(r"`(\w+)`", fields) for name, fields in ROW.findall(PROTOCOL.read_text())}


@pytest.mark.parametrize(
    "kind",
    [
        wire.RevisionLaunch,
        wire.PlannedMemory,
        wire.Order,
        wire.HostBrief,
        wire.GpuBrief,
        wire.DoorDocument,
        wire.DoorModel,
        wire.DoorLimits,
        HostEventReport,
    ],
)
def test_protocol_lists_each_wire_types_fields(kind: type) -> None:
    table = documented()
    assert kind.__name__ in table, f"PROTOCOL.md has no row for {kind.__name__}"
    assert table[kind.__name__] == [f.name for f in dataclasses.fields(kind)]


def test_every_wire_type_is_in_the_protocol() -> None:
    types = {name for name in wire.__all__ if dataclasses.is_dataclass(getattr(wire, name))}
    assert types and types <= set(documented()), sorted(types - set(documented()))

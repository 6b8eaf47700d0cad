"""hostagent/PROTOCOL.md's tables of the wire's types say exactly the fields serving/wire.py and
serving/agent_reports.py carry: an agent or a panel written from the document reads every field
the other side sends, and none it does not. Each report the agent sends reads back as itself."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from serving import agent_reports as reports
from serving import wire
from serving.host_events import HostEventReport

PROTOCOL = Path(__file__).resolve().parents[1] / "hostagent" / "PROTOCOL.md"
ROW = re.compile(r"^\| `(\w+)` \| ((?:`\w+`(?:, )?)+) \|$", re.MULTILINE)


def documented() -> dict[str, list[str]]:
    return {name: re.findall(r"`(\w+)`", fields) for name, fields in ROW.findall(PROTOCOL.read_text())}


def _types(module: Any) -> list[type]:
    return [getattr(module, name) for name in module.__all__ if dataclasses.is_dataclass(getattr(module, name))]


@pytest.mark.parametrize("kind", [*_types(wire), *_types(reports), HostEventReport], ids=lambda kind: kind.__name__)
def test_protocol_lists_each_wire_types_fields(kind: type) -> None:
    table = documented()
    assert kind.__name__ in table, f"PROTOCOL.md has no row for {kind.__name__}"
    assert table[kind.__name__] == [f.name for f in dataclasses.fields(kind)]


def test_every_wire_type_is_in_the_protocol() -> None:
    types = {kind.__name__ for kind in _types(wire) + _types(reports)}
    assert len(types) > 20 and types <= set(documented()), sorted(types - set(documented()))


RUN = reports.EngineRun(key="2026-12-07T00:00:00+00:00|4242", engine="llama.cpp", revision_id="7", revision_label="r3")
SENT = [
    reports.Registration(facts={"cpu_logical_cores": 8}, inventory={"gpus": []}, engine_state={"running": False}),
    reports.HostProbe(facts={"hostname": "box"}, inventory={"available": False}),
    reports.Heartbeat(engine_state={"running": True}, engine_metrics={"requests_running": 1.0, "kv_cache_usage": None}),
    reports.Telemetry(
        gpu_samples=({"index": 0, "timestamp": 1.8e9},),
        memory=reports.MemoryReport(
            ts=1.8e9,
            engines=(reports.EngineMemory(revision_id="7", devices={"gpu0": 5 << 30}),),
            outside=(reports.OutsideMemory(pid=99, name="python", gpu=0, bytes=1 << 30),),
        ),
    ),
    reports.WatchdogEvent(kind="restarted", message="restarted revision r3"),
    reports.EngineLogChunk(run=RUN, offset=0, end=12, lines=("loading", "ready")),
    reports.OperationProgress(stage="installing", progress=0.5, log="step 2"),
    reports.OperationEnd(state="succeeded", result={"gpus": 1}, install=reports.InstallRecord("llama.cpp", "b1")),
    reports.OperationEnd(
        state="succeeded",
        install=reports.InstallRecord(
            engine="vllm",
            version="0.33.0",
            path="/opt/vllm",
            binary="/opt/vllm/bin/vllm",
            details=reports.InstallDetails(
                distribution="vllm",
                package_version="0.33.0",
                packages={"transformers": "5.19.0", "vllm-gguf-plugin": None},
                adopted=True,
            ),
        ),
    ),
    reports.DoorReport(
        version="abc",
        bind="127.0.0.1:4000",
        state=(reports.DoorModelState(name="gemma-r3", aliases=("g",), mode="pinned", memory={"ram": 1}),),
        usage=(reports.UsageTotal(day="2026-12-07", key="", model="gemma-r3", requests=2, prompt_tokens=9),),
        refused=reports.TableRefusal(version="v2", reason="both listen on port 8001"),
    ),
    reports.Registered(
        host="box",
        queue="host.box",
        gpus=1,
        lost=("op",),
        restore=reports.Restore("op", 3, "7"),
        engine_installs={"vllm": {"0.32.0": {"path": "/opt/vllm", "binary": "/opt/vllm/bin/python"}}},
    ),
]


@pytest.mark.parametrize("report", SENT, ids=lambda report: type(report).__name__)
def test_each_report_reads_back_as_itself_through_json(report: Any) -> None:
    assert type(report).from_dict(json.loads(json.dumps(report.to_dict()))) == report


def test_a_report_of_the_wrong_shape_names_its_field() -> None:
    body = SENT[5].to_dict() | {"lines": ["fine", 3]}
    with pytest.raises(wire.WireError) as refused:
        reports.EngineLogChunk.from_dict(body)
    assert refused.value.field == "engine-log.lines"
    with pytest.raises(wire.WireError, match=r"memory.engines\[0\].revision_id"):
        reports.Telemetry.from_dict({"memory": {"engines": [{"revision_id": True, "devices": {}}]}})


def test_the_end_of_an_operation_sends_a_benchmark_or_an_install_only_when_there_is_one() -> None:
    assert set(reports.OperationEnd(state="failed", error="no").to_dict()) == {"state", "result", "error"}
    assert "memory" not in reports.Telemetry().to_dict()

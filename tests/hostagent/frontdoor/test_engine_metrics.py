"""The front door's /metrics carries its loaded engines' own series (real llama-servers), labelled
with host, model and alias; engines not loaded are never woken for it, and one that hangs is left
out within the scrape deadline while the others' series still come (docs/front-door.md#metrics)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from hostagent.frontdoor.engine_metrics import ScrapeError, relabel, render

from .conftest import DoorThread, make_host, start_door

pytestmark = pytest.mark.engine

ASK = [{"role": "user", "content": "Name three colours."}]
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "engines"


@pytest.fixture(scope="module")
def door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DoorThread]:
    door = start_door(make_host(), tmp_path_factory.mktemp("engines"), host_name="gpu-box-1")
    yield door
    door.close()


def scrape(door: DoorThread) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{door.url}/metrics", timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def engine_series(found: dict[tuple[str, tuple[tuple[str, str], ...]], float], model: str) -> dict[str, float]:
    return {
        name: value
        for (name, labels), value in found.items()
        if name.startswith("llamacpp:") and ("model", model) in labels
    }


def test_a_scrape_wakes_no_engine(door: DoorThread) -> None:
    found = scrape(door)
    assert not [name for name, _ in found if name.startswith("llamacpp:")]
    assert {name: row["phase"] for name, row in door.state().items()} == {"small": "unloaded", "wide": "unloaded"}


def test_loaded_engines_series_come_with_host_model_and_alias(door: DoorThread) -> None:
    client = OpenAI(base_url=f"{door.url}/v1", api_key="none", max_retries=0, timeout=300)
    answer = client.chat.completions.create(model="fast", messages=ASK, max_tokens=4)
    assert answer.usage is not None
    found = scrape(door)
    labels = (("alias", "fast"), ("host", "gpu-box-1"), ("model", "small"))
    # The engine's own count of the prompt the door passed on, under the engine's own name.
    assert 0 < found[("llamacpp:prompt_tokens_total", labels)] <= answer.usage.prompt_tokens
    assert found[("llamacpp:tokens_predicted_total", labels)] == answer.usage.completion_tokens
    assert found[("frontdoor_engine_scrape_up", (("model", "small"),))] == 1
    assert not engine_series(found, "wide")  # not loaded: not asked, not loaded for it
    assert door.state()["wide"]["phase"] == "unloaded"

    client.chat.completions.create(model="coder", messages=ASK, max_tokens=4)
    text = httpx.get(f"{door.url}/metrics", timeout=30).text
    assert text.count("# TYPE llamacpp:prompt_tokens_total counter") == 1  # two engines, one family
    found = scrape(door)
    assert engine_series(found, "small") and engine_series(found, "wide")
    assert ("llamacpp:requests_processing", (("alias", "coder"), ("host", "gpu-box-1"), ("model", "wide"))) in found


def test_a_hung_engine_is_left_out_within_the_deadline(door: DoorThread) -> None:
    client = OpenAI(base_url=f"{door.url}/v1", api_key="none", max_retries=0, timeout=300)
    for name in ("fast", "coder"):
        client.chat.completions.create(model=name, messages=ASK, max_tokens=2)
    door.door.engines.timeout_s = 0.5
    pid = door.loader.pid("small")
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # alive, listening, answering nothing
    try:
        started = time.monotonic()
        found = scrape(door)
        took = time.monotonic() - started
        again = scrape(door)
    finally:
        os.kill(pid, signal.SIGCONT)
        door.door.engines.timeout_s = 2.0
    assert took < 2.0
    assert not engine_series(found, "small") and engine_series(found, "wide")
    assert found[("frontdoor_engine_scrape_up", (("model", "small"),))] == 0
    assert found[("frontdoor_engine_scrape_up", (("model", "wide"),))] == 1
    failures = (("model", "small"), ("reason", "timeout"))
    assert (
        again[("frontdoor_engine_scrape_failures_total", failures)]
        == found[("frontdoor_engine_scrape_failures_total", failures)] + 1
    )
    assert door.state()["small"]["phase"] == "loaded"  # a failed scrape is not a dead engine to the door
    assert engine_series(scrape(door), "small")  # back once it answers


def test_vllm_series_keep_their_names_types_and_labels() -> None:
    text = (FIXTURES / "vllm_0.10.0_glm45_metrics.txt").read_text()
    families: dict[str, Any] = {}
    relabel(text, {"host": "h1", "model": "glm-r3", "alias": "glm"}, families)
    theirs = '\nvllm:extra{model="theirs",x="a,b}"} 1\n'  # a label the door sets, and a value with } and ,
    relabel(text + theirs, {"host": "h1", "model": "glm-r4", "alias": "g2"}, families)
    merged = render(families).decode()
    parsed = {f.name: f for f in text_string_to_metric_families(merged)}
    original = {f.name: f for f in text_string_to_metric_families(text)}
    types = {name: f.type for name, f in parsed.items()}
    assert all(types[name] == family.type for name, family in original.items())
    for family in original.values():
        for sample in family.samples:
            for model, alias in (("glm-r3", "glm"), ("glm-r4", "g2")):
                labels = {**sample.labels, "host": "h1", "model": model, "alias": alias}
                assert any(
                    s.name == sample.name and s.labels == labels and s.value == sample.value
                    for s in parsed[family.name].samples
                )
    extra = next(s for s in parsed["vllm:extra"].samples)
    assert extra.labels == {"host": "h1", "model": "glm-r4", "alias": "g2", "exported_model": "theirs", "x": "a,b}"}


@pytest.mark.parametrize("bad", ["vllm:x{a=1} 2", "vllm:x two", 'vllm:x{a="1"'])
def test_text_that_is_not_prometheus_leaves_that_engine_out(bad: str) -> None:
    families: dict[str, Any] = {}
    with pytest.raises(ScrapeError):
        relabel(f"# TYPE vllm:ok gauge\nvllm:ok 1\n{bad}\n", {"host": "h", "model": "m", "alias": "m"}, families)
    assert families == {}

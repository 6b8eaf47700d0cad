"""Engine logs as the agent API receives them (a real host token over the test client, real
PostgreSQL) and as the pages show them: in order, a resend stored once, a gap said, bounded per
start and per host, another host's revision never linked, warnings-and-errors filter, and the
follower that appends new lines and moves on to the next start."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.utils import timezone

from deployments.models import EngineLogRun, ModelVariant
from hardware.credentials import host_token_issue
from hardware.models import Host
from tests.hardware.factories import HostFactory
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db


@pytest.fixture
def host_token(catalog: None) -> tuple[Host, str]:
    HostFactory(name="h1", last_heartbeat=timezone.now())
    host, token = host_token_issue(name="h1", actor=None)
    return host, token


def send(client: Any, token: str, run: dict[str, Any], offset: int, lines: list[str], end: int | None = None) -> Any:
    end = offset + sum(len(line) + 1 for line in lines) if end is None else end
    body = {"run": run, "offset": offset, "end": end, "lines": lines}
    return client.post(
        "/agent/v1/engine-log",
        data=json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


RUN = {
    "key": "2026-12-03T07:00:00+00:00|4242",
    "engine": "llama.cpp",
    "revision_label": "r1",
    "started_at": "2026-12-03T07:00:00+00:00",
}


def test_lines_arrive_in_order_a_resend_is_stored_once_and_a_gap_is_said(client, host_token):
    host, token = host_token
    lines = ["main: loading model", "llama_kv_cache: size = 36.00 MiB"]
    received = 100 + len("\n".join(lines)) + 1
    first = send(client, token, RUN, 100, lines)
    assert first.status_code == 200 and first.json() == {"received": received}
    # The same report again (its answer was lost): nothing added, the agent told where to resume.
    assert send(client, token, RUN, 100, lines).json() == {"received": received}
    listening = "main: server is listening on http://127.0.0.1:8080"
    send(client, token, RUN, received, [listening])
    # Bytes the agent skipped (a huge backlog) are said, not silently joined.
    send(client, token, RUN, 10_000, ["srv  update_slots: all slots are idle"])
    skipped = 10_000 - (received + len(listening) + 1)
    run = EngineLogRun.objects.get(host=host)
    assert run.text.splitlines() == [
        "main: loading model",
        "llama_kv_cache: size = 36.00 MiB",
        "main: server is listening on http://127.0.0.1:8080",
        f"[… {skipped} bytes of the engine's log were not received …]",
        "srv  update_slots: all slots are idle",
    ]
    assert run.lines == 5 and run.engine == "llama.cpp" and run.revision_label == "r1"


def test_a_start_is_cut_to_its_last_lines_and_a_host_keeps_its_last_starts(client, host_token, settings):
    host, token = host_token
    settings.ENGINE_LOG_RUN_BYTES = 1000
    settings.ENGINE_LOG_RUNS_KEPT = 3
    offset = 0
    for i in range(100):
        line = f"line {i:03d} " + "x" * 40
        send(client, token, RUN, offset, [line])
        offset += len(line) + 1
    run = EngineLogRun.objects.get(host=host)
    kept = run.text.splitlines()
    assert len(run.text) <= 1000 and kept[-1].startswith("line 099")
    assert run.lines == 100 and run.dropped_lines == 100 - len(kept)
    from deployments.services.engine_logs import engine_log_lines

    numbered = engine_log_lines(run, after=97)
    assert [(n.number, n.text[:8]) for n in numbered] == [(98, "line 097"), (99, "line 098"), (100, "line 099")]

    for minute in range(1, 5):
        start = {**RUN, "key": f"start {minute}", "started_at": f"2026-12-03T07:0{minute}:00+00:00"}
        send(client, token, start, 0, [f"started {minute}"])
    assert list(EngineLogRun.objects.filter(host=host).values_list("key", flat=True)) == [
        "start 4",
        "start 3",
        "start 2",
    ]


def test_reports_that_are_not_a_log_are_refused_and_change_nothing(client, host_token, operator):
    host, token = host_token
    other = HostFactory(name="h2")
    theirs = make_revision(
        host=other,
        engine="llama.cpp",
        model_variant=ModelVariant.objects.get(name="Qwen3.5-122B-A10B-Q6_K_XL"),
        knobs={"ctx_size": 4096},
        message="another host's",
        actor=operator,
    )
    for run, offset, lines, end in [
        ("run", 0, ["x"], 2),
        ({"key": ""}, 0, ["x"], 2),
        ({"key": "k" * 81}, 0, ["x"], 2),
        (RUN, -1, ["x"], 1),
        (RUN, 5, ["x"], 2),
        (RUN, 0, "not a list", 2),
        (RUN, 0, [1, 2], 4),
        (RUN, 0, ["x"] * 10_001, 20_002),
    ]:
        response = send(client, token, run, offset, lines, end)
        assert response.status_code == 400 and response.json()["error"], (run, offset)
    assert not EngineLogRun.objects.exists()
    # NUL and lone surrogates are stored as replacement characters; a revision of another host is never linked.
    response = send(client, token, {**RUN, "revision_id": str(theirs.pk)}, 0, ["a\x00b", "c\ud800d"], 8)
    assert response.status_code == 200
    run = EngineLogRun.objects.get(host=host)
    assert run.text == "a\ufffdb\nc?d\n" and run.revision is None
    # Without the host's token nothing is taken.
    assert send(client, "cph_not-a-token", RUN, 8, ["y"]).status_code == 401


def test_the_page_and_the_follower_show_new_lines_filter_and_move_to_the_next_start(client, host_token, viewer):
    host, token = host_token
    start = ["main: loading model", "W load: special_eos_id is not in special_eog_ids", "ok"]
    send(client, token, RUN, 0, start)
    client.force_login(viewer)
    box = client.get(f"/hosts/{host.name}/engine-log/follow/")
    assert box.status_code == 200
    body = box.content.decode()
    assert "main: loading model" in body and "Warnings and errors only" in body
    shown = re.search(r'<pre class="log engine-log-lines"[^>]*>(.*?)</pre>', body, re.S).group(1)
    assert re.sub(r"<[^>]+>", "", shown) == "\n".join(start) + "\n"  # one line each, not double-spaced
    follow = re.search(r'hx-get="([^"]*after=3[^"]*)"', body)
    assert follow, body
    url = follow.group(1).replace("&amp;", "&")

    # Nothing new: only the next poller.
    assert "log-line" not in client.get(url).content.decode()
    send(client, token, RUN, len("\n".join(start)) + 1, ["srv  update_slots: all slots are idle"])
    more = client.get(url).content.decode()
    assert 'hx-swap-oob="beforeend:#engine-log-lines"' in more and "all slots are idle" in more
    assert "main: loading model" not in more and "after=4" in more

    # The engine starts again (a switch or a watchdog restart): the follower moves on to it.
    second = {**RUN, "key": "second start", "revision_label": "r2", "started_at": "2026-12-03T07:05:00+00:00"}
    send(client, token, second, 300, ["main: loading model r2"])
    moved = client.get(url.replace("after=3", "after=4")).content.decode()
    assert "the engine started again at" in moved and "(r2)" in moved and "main: loading model r2" in moved
    newest = EngineLogRun.objects.get(key="second start")
    assert f"run={newest.pk}" in moved and "after=1" in moved

    # Warnings and errors only, and an earlier start on the log page.
    only = client.get(f"/hosts/{host.name}/engine-log/?run={EngineLogRun.objects.get(key=RUN['key']).pk}&problems=1")
    text = only.content.decode()
    assert "special_eos_id" in text and "main: loading model" not in text
    assert client.get(f"/hosts/{host.name}/engine-log/?run=999999").status_code == 404
    # A follower whose start was dropped (the retention limit) goes on with the newest, from line 1.
    gone = client.get(f"/hosts/{host.name}/engine-log/follow/?run=999999&after=40&problems=0").content.decode()
    assert "main: loading model r2" in gone and f"run={newest.pk}" in gone
    assert client.get(f"/hosts/{host.name}/engine-log/follow/?after=x").status_code == 400


def test_an_idle_followers_poll_does_not_read_the_log_text(client, host_token, viewer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    host, token = host_token
    send(client, token, RUN, 0, ["x" * 4000] * 100)
    run = EngineLogRun.objects.get(host=host)
    client.force_login(viewer)
    with CaptureQueriesContext(connection) as queries:
        idle = client.get(f"/hosts/{host.name}/engine-log/follow/?run={run.pk}&after={run.lines}&problems=0")
    assert "log-line" not in idle.content.decode()
    log_reads = [q["sql"] for q in queries.captured_queries if "enginelogrun" in q["sql"]]
    assert log_reads and not any('"text"' in sql for sql in log_reads), log_reads


def test_odd_run_facts_are_refused_or_left_out_never_a_500(client, host_token, settings):
    """An impossible start time is refused (and nothing kept); a revision id that is no id and an
    engine that is none of ours are left out; a host whose clock stepped back keeps its current
    start (the newest received), not the ones with later times."""
    host, token = host_token
    bad_time = send(client, token, {**RUN, "key": "k-time", "started_at": "2026-13-45T00:00:00"}, 0, ["x"])
    assert bad_time.status_code == 400 and "started_at" in bad_time.json()["error"]
    odd = {**RUN, "key": "k-odd", "revision_id": "²", "engine": "<script>"}
    assert send(client, token, odd, 0, ["line"]).status_code == 200
    huge = {**RUN, "key": "k-huge", "revision_id": str(2**80)}
    assert send(client, token, huge, 0, ["line"]).status_code == 200
    kept = {r.key: r for r in EngineLogRun.objects.filter(host=host)}
    assert set(kept) == {"k-odd", "k-huge"} and kept["k-odd"].engine == "" and kept["k-odd"].revision_id is None

    settings.ENGINE_LOG_RUNS_KEPT = 2
    back = {**RUN, "key": "k-back", "started_at": "2020-01-01T00:00:00+00:00"}
    assert send(client, token, back, 0, ["after the clock stepped back"]).status_code == 200
    assert send(client, token, back, 29, ["and on"]).status_code == 200
    assert set(EngineLogRun.objects.filter(host=host).values_list("key", flat=True)) == {"k-huge", "k-back"}

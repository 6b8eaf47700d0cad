"""Engine logs as hosts' agents send them (hostagent/enginelog.py): one row per engine start,
lines appended in order, bounded per start and per host; and the lines a page shows."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from controlpanel.params import parse_int
from core.secrets_mask import mask_text
from deployments.choices import Engine
from deployments.models import DeploymentRevision, EngineLogRun
from hardware.models import Host
from serving.agent_reports import EngineLogChunk, EngineRun
from serving.engine_log_lines import problem_flags

MAX_LINES_PER_REPORT = 10_000
MAX_LINE = 4096


def _clean(line: str) -> str:
    # PostgreSQL text holds no NUL; a lone surrogate cannot be stored either.
    # Masked here too: the agent masks what it knows, the panel what it stores and shows.
    line = mask_text(line[:MAX_LINE].replace("\x00", "\ufffd"))
    return line.encode("utf-8", "replace").decode("utf-8")


def _run_for(host: Host, run: EngineRun) -> EngineLogRun:
    key = run.key
    if not key or len(key) > 80:
        raise ValidationError("run.key must be a string of 1 to 80 characters.")
    found = EngineLogRun.objects.select_for_update().filter(host=host, key=key).first()
    if found is not None:
        return found
    try:
        started = parse_datetime(run.started_at or "") or timezone.now()
    except ValueError as exc:  # well formed but no such time (month 13)
        raise ValidationError("run.started_at must be an ISO 8601 time.") from exc
    if timezone.is_naive(started):
        started = timezone.make_aware(started)
    revision = None
    with contextlib.suppress(ValueError):  # not a revision id: the run is kept without the link
        revision_id = parse_int(str(run.revision_id), name="run.revision_id", minimum=1)
        revision = DeploymentRevision.objects.filter(pk=revision_id, host=host).first()  # its own only
    engine = run.engine
    created = EngineLogRun.objects.create(
        host=host,
        key=key,
        revision=revision,
        revision_label=(run.revision_label or "")[:80],
        engine=engine if engine in Engine.values else "",
        started_at=started,
    )
    # The newest are the last received: a host's clock that stepped back must not get its
    # current start deleted as the oldest.
    keep = settings.ENGINE_LOG_RUNS_KEPT
    old = EngineLogRun.objects.filter(host=host).order_by("-pk").values_list("pk", flat=True)[keep:]
    EngineLogRun.objects.filter(pk__in=list(old)).delete()
    return created


@transaction.atomic
def engine_log_append(*, host: Host, chunk: EngineLogChunk) -> EngineLogRun:
    """Append a report of lines (bytes offset..end of the host's log) to its run.

    A report that starts before what the panel has is a resend (a lost answer, a restarted
    agent): nothing is stored, and the run's `received` tells the agent where to resume. One
    that starts after it notes the gap. ValidationError on a malformed report."""
    offset, end, lines = chunk.offset, chunk.end, chunk.lines
    if not all(0 <= v < 1 << 62 for v in (offset, end)):
        raise ValidationError("offset and end must be byte positions.")
    if end < offset:
        raise ValidationError("end must not be before offset.")
    if len(lines) > MAX_LINES_PER_REPORT:
        raise ValidationError(f"lines must be a list of at most {MAX_LINES_PER_REPORT} strings.")
    cleaned = [_clean(line) for line in lines]
    record = _run_for(host, chunk.run)
    if record.lines and offset < record.received:
        return record
    if record.lines and offset > record.received:
        cleaned.insert(0, f"[… {offset - record.received} bytes of the engine's log were not received …]")
    if not cleaned:
        return record
    text = record.text + "".join(line + "\n" for line in cleaned)
    dropped = 0
    limit = settings.ENGINE_LOG_RUN_BYTES
    if len(text) > limit:
        cut = text.find("\n", len(text) - limit) + 1
        dropped = text.count("\n", 0, cut)
        text = text[cut:]
    record.text = text
    record.lines += len(cleaned)
    record.dropped_lines += dropped
    record.received = end
    record.save(update_fields=["text", "lines", "dropped_lines", "received", "updated_at"])
    return record


@dataclass(frozen=True)
class LogLine:
    number: int
    text: str
    problem: bool


def engine_log_lines(run: EngineLogRun, *, after: int = 0, problems_only: bool = False, last: int = 0) -> list[LogLine]:
    """The run's kept lines numbered from its first line ever, those after `after`; with `last`,
    only the last that many (after filtering). Nothing after `after`: no text is read (a deferred
    text stays unloaded, so an idle follower's poll costs no 512 KiB read)."""
    if after >= run.lines:
        return []
    if "text" in run.get_deferred_fields():  # the text and its count as of one moment, not two
        run.refresh_from_db(fields=["text", "lines", "dropped_lines"])
    kept = run.text.split("\n")
    if kept and kept[-1] == "":
        kept.pop()
    first = run.lines - len(kept) + 1
    out = []
    flags = problem_flags(kept)  # all of them: a traceback's lines before `after` decide those after it
    for i, text in enumerate(kept):
        number = first + i
        if number <= after:
            continue
        problem = flags[i]
        if problems_only and not problem:
            continue
        out.append(LogLine(number, text, problem))
    return out[-last:] if last else out


def engine_log_runs(host: Host) -> list[EngineLogRun]:
    """The host's kept runs, newest first, without their text."""
    return list(
        EngineLogRun.objects.filter(host=host)
        .defer("text")
        .select_related("revision")
        .order_by("-pk")[: settings.ENGINE_LOG_RUNS_KEPT]
    )


def latest_run(host: Host) -> EngineLogRun | None:
    """The host's newest start; its text is loaded only when read."""
    return EngineLogRun.objects.filter(host=host).defer("text").order_by("-pk").first()

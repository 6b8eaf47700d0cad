"""A host's engine log: the running engine's, following as it grows (host page and its own
page), earlier starts' logs, and a filter that keeps warnings and errors. The lines come from
what the host's agent sent (deployments.services.engine_logs); no path is ever read here."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import path, reverse
from django.views.decorators.http import require_GET

from controlpanel.params import int_param
from controlpanel.roles import VIEWER, role_required
from deployments.models import EngineLogRun
from deployments.services.engine_logs import engine_log_lines, engine_log_runs, latest_run
from hardware.models import Host

BOX_LINES = 200  # what the host page's box starts with
PAGE_LINES = 5000  # what the log page shows of a run


def _follow_url(host: Host, run: EngineLogRun | None, after: int, problems: bool) -> str:
    query = f"after={after}&problems={int(problems)}" + (f"&run={run.pk}" if run else "")
    return f"{reverse('deployments:engine_log_follow', args=[host.name])}?{query}"


def _choices(request: HttpRequest, host: Host, *, following: bool = False) -> tuple[EngineLogRun | None, bool]:
    """The run asked for (else the newest) and the filter. A follower whose run was dropped by
    the retention limit (many newer starts while the page stayed open) gets None: it then goes
    on with the newest start, from its first line."""
    pk = int_param(request.GET, "run")
    run = EngineLogRun.objects.filter(pk=pk, host=host).defer("text").first() if pk else latest_run(host)
    if pk and run is None and not following:
        raise Http404("No such engine start on this host (only the last ones are kept).")
    return run, bool(int_param(request.GET, "problems", default=0, maximum=1))


@require_GET
@role_required(VIEWER)
def engine_log_page(request: HttpRequest, name: str) -> HttpResponse:
    host = get_object_or_404(Host, name=name)
    run, problems = _choices(request, host)
    lines = engine_log_lines(run, problems_only=problems, last=PAGE_LINES) if run else []
    runs = engine_log_runs(host)
    following = run is not None and bool(runs) and run.pk == runs[0].pk
    context = {
        "host": host,
        "run": run,
        "runs": runs,
        "lines": lines,
        "problems": problems,
        "follow_url": _follow_url(host, run, run.lines if run else 0, problems) if following or not run else "",
        "page_lines": PAGE_LINES,
    }
    return render(request, "deployments/engine_log.html", context)


@require_GET
@role_required(VIEWER)
def engine_log_follow(request: HttpRequest, name: str) -> HttpResponse:
    """Without `after`: the box (the last lines and a poller). With it: the lines after line
    `after` appended out of band, and the next poller; a newer start is followed once the
    lines of the one before are all shown."""
    host = get_object_or_404(Host, name=name)
    run, problems = _choices(request, host, following=True)
    after = int_param(request.GET, "after")
    if after is None:
        lines = engine_log_lines(run, problems_only=problems, last=BOX_LINES) if run else []
        context = {
            "host": host,
            "run": run,
            "lines": lines,
            "problems": problems,
            "follow_url": _follow_url(host, run, run.lines if run else 0, problems),
            "box_url": reverse("deployments:engine_log_follow", args=[host.name]),
        }
        return render(request, "deployments/_engine_log_box.html", context)
    lines = engine_log_lines(run, after=after, problems_only=problems) if run else []
    newest = latest_run(host)
    started = None
    # A newer start: the agent sent the whole of the one before first, so it is complete here.
    if newest is not None and (run is None or newest.pk != run.pk):
        started = newest if run is not None else None  # the first start on this page needs no marker
        run = newest
        lines += engine_log_lines(newest, problems_only=problems)
    context = {
        "lines": lines,
        "started": started,
        "follow_url": _follow_url(host, run, run.lines if run else 0, problems),
    }
    return render(request, "deployments/_engine_log_more.html", context)


urlpatterns = [
    path("hosts/<slug:name>/engine-log/", engine_log_page, name="engine_log"),
    path("hosts/<slug:name>/engine-log/follow/", engine_log_follow, name="engine_log_follow"),
]

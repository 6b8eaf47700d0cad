"""The panel's own overhead on a model switch, on the real engine.

Prints, over a few rounds with the real llama-server and the Gemma 3 270M model:
- direct: the same argv launched by hand and polled until /health is 200 and /v1/models
  lists the served name;
- panel: a switch request (service -> broker -> host agent -> stop, start, ready, verify,
  report to the panel's agent API) until the Operation row says succeeded; the agent runs as a
  GPU host's does (host token, the panel's web server, no database URL);
and the difference (the panel's overhead), with where the panel's seconds went (medians):
the request (service, row, enqueue), queueing until the agent has begun it, the agent's
preflight and reports, stopping the previous engine, launch to ready (the engine's own load,
as the direct launch measures it, plus polling granularity), the verification completion,
the rest of the start, the state report, the finish reaching the panel, and this script
seeing it.

    python bench/bench_switch.py            # embedded default: SQLite + the embedded Redis
    DATABASE_URL=postgres://... CELERY_BROKER_URL=redis://... python bench/bench_switch.py

With no DATABASE_URL it works in a throwaway data folder, so it never touches real data.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
if "DATABASE_URL" not in os.environ:
    os.environ["CONTROLPANEL_DATA_DIR"] = tempfile.mkdtemp(prefix="bench-switch-")
os.environ.setdefault("CONTROLPANEL_HOST_STATE_DIR", tempfile.mkdtemp(prefix="bench-switch-state-"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
ROUNDS = int(os.environ.get("ROUNDS", "3"))


def main() -> None:
    import django

    django.setup()
    import httpx
    from django.core.management import call_command
    from django.utils import timezone

    from deployments.choices import OperationState
    from deployments.models import ModelVariant, Operation
    from deployments.runtime_bridge import engine_config_for_revision, spec_for_values
    from deployments.services.revisions import revision_create
    from deployments.services.switch import switch_request
    from hardware.credentials import host_token_issue
    from hardware.models import Host
    from hostagent.binaries import resolve_binary
    from hostagent.local import supervisor_for
    from serving.engines.registry import get_adapter
    from serving.launch import HostFacts
    from tests.support.llama import free_port, gemma_model_path
    from tests.support.panel import PanelServer

    call_command("migrate", verbosity=0)
    call_command("catalog", "load", stdout=open(os.devnull, "w"))  # noqa: SIM115
    name = f"bench-{uuid.uuid4().hex[:6]}"
    web = PanelServer(free_port(), Path(tempfile.mkdtemp(prefix="bench-switch-web-")) / "web.log").start()
    _host, token = host_token_issue(name=name, actor=None)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SECRET_KEY")}
    env.update(CONTROLPANEL_ENGINE_BIND_HOST="127.0.0.1", CONTROLPANEL_URL=web.url, CONTROLPANEL_HOST_TOKEN=token)
    env.setdefault("CONTROLPANEL_MODEL_DIRS", str(Path(gemma_model_path()).parent))  # the engine may open the model
    agent = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "agent",
            "--name",
            name,
            "--no-telemetry",
            "--no-watchdog",
            "--loglevel",
            "WARNING",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not Host.objects.filter(name=name, last_heartbeat__isnull=False).exists():
            if time.monotonic() > deadline or agent.poll() is not None:
                raise SystemExit("the agent did not come up")
            time.sleep(0.2)
        time.sleep(2.0)  # let the worker finish connecting to the broker
        host = Host.objects.get(name=name)
        model = ModelVariant.objects.create(name=f"gemma-{name}", format="gguf", gguf_file=gemma_model_path())
        port = free_port()
        revisions = [
            revision_create(
                host=host,
                spec=spec_for_values(
                    engine="llama.cpp",
                    engine_version="",
                    model=model,
                    served_name="gemma",
                    port=port,
                    knobs={"ctx_size": ctx, "parallel": 1, "n_gpu_layers": 0},
                    env={},
                ),
                message=f"ctx {ctx}",
                actor=None,
            )
            for ctx in (2048, 4096)
        ]

        direct, panel = [], []
        parts: dict[str, list[float]] = {}
        for i in range(ROUNDS):
            revision = revisions[i % 2]
            supervisor_for(name).stop(grace=10)
            spec = get_adapter("llama.cpp").launch_spec(
                engine_config_for_revision(
                    revision, facts=HostFacts(bind_host="127.0.0.1", binary=resolve_binary("llama.cpp", ""))
                )
            )
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                list(spec.argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **spec.env}
            )
            with httpx.Client(timeout=2.0) as http:
                while True:
                    try:
                        if http.get(spec.health_url).status_code == 200 and any(
                            m["id"] == "gemma" for m in http.get(spec.models_url).json()["data"]
                        ):
                            break
                    except httpx.HTTPError:
                        pass
                    time.sleep(0.05)
            direct.append(time.perf_counter() - t0)
            proc.terminate()
            proc.wait(10)

            t0 = time.perf_counter()
            op = switch_request(revision=revision, actor=None)
            requested = time.perf_counter() - t0
            while op.state not in (OperationState.SUCCEEDED, OperationState.FAILED, OperationState.LOST):
                time.sleep(0.02)
                op = Operation.objects.get(pk=op.pk)
            panel.append(time.perf_counter() - t0)
            seen = timezone.now()
            if op.state != OperationState.SUCCEEDED:
                raise SystemExit(f"switch failed: {op.error}")
            timing = op.result.get("timing") or {}
            agent_s = sum(float(v) for v in timing.values())
            assert op.started_at and op.finished_at
            for part, value in (
                ("request (service, row, enqueue)", requested),
                ("queued until the agent began", (op.started_at - op.created_at).total_seconds() - requested),
                *((k, float(v)) for k, v in timing.items()),
                ("begin/finish round trips, rest", (op.finished_at - op.started_at).total_seconds() - agent_s),
                ("finished -> seen here (20 ms polls)", (seen - op.finished_at).total_seconds()),
            ):
                parts.setdefault(part, []).append(value)
            print(f"round {i + 1}: direct {direct[-1]:.2f} s, panel {panel[-1]:.2f} s", flush=True)

        d, p = statistics.median(direct), statistics.median(panel)
        broker = os.environ.get("CELERY_BROKER_URL", "redis+socket:// (embedded)")
        print(f"\nbroker: {broker}")
        print(f"direct launch to ready (median of {ROUNDS}): {d:.2f} s")
        print(f"panel switch request to ready (median):      {p:.2f} s")
        print(f"panel overhead:                              {p - d:+.2f} s")
        print("where the panel's seconds went (medians; ready_s is the engine's own load):")
        for part, values in parts.items():
            print(f"  {part:<40} {statistics.median(values):6.3f} s")
    finally:
        agent.terminate()
        agent.wait(20)
        web.kill()
        supervisor_for(name).stop(grace=10)


if __name__ == "__main__":
    import django

    django.setup()
    from embedded.panel import embedded_redis

    with embedded_redis():  # no CELERY_BROKER_URL: the panel's own Redis, as scripts/run starts it
        main()

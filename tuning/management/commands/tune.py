"""`manage.py tune start|list|status|cancel|propose`: tuning runs from a shell.

    tune start --host gpu1 --space parallel=1,2,4 --space batch_size=256,1024 \\
        --objective throughput --limit "ttft_p95<=500,j_per_token<=base" --profile sweep --trials 6
    tune start --host gpu2 --space max_num_seqs=8,16 --engine sglang:max_running_requests=8,16

`--engine ENGINE[:KNOB=V1,V2]` (repeatable) tries another engine too, with its own knobs (a bare
ENGINE: at its defaults), where the base's model format and the host's installs allow it.

On a host that requires review (`--user` a person) `start` opens a change request for the run and
exits 0; `propose` switches to the best trial (with `--group TAG`, rolls its knobs out over those
hosts), or opens a change request where review is on."""

from __future__ import annotations

from typing import Any

from deployments.management.cli import (
    ActionCommand,
    Actions,
    BadInput,
    add_user_option,
    bounded_int,
    get_actor,
    get_host,
    get_revision,
    parse_value,
)
from hardware.review import ChangeRequested
from tuning import selectors
from tuning.models import TuningRun
from tuning.services import (
    MAX_MINUTES,
    MAX_REPEAT_BEST,
    MAX_REPEATS,
    MAX_TRIALS,
    tuning_cancel,
    tuning_propose,
    tuning_start,
)

ID = bounded_int(1, 2**31 - 1)


def parse_space(items: list[str]) -> dict[str, list[Any]]:
    """["parallel=1,2,4", "flash_attn=on,off"] -> {"parallel": [1, 2, 4], "flash_attn": ["on", "off"]}."""
    space: dict[str, list[Any]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not name.strip() or not values.strip():
            raise BadInput(f"--space {item[:60]!r} is not KNOB=VALUE,VALUE,...")
        if name.strip() in space:
            raise BadInput(f"--space names {name.strip()[:60]} twice")
        space[name.strip()] = [parse_value(v.strip()) for v in values.split(",") if v.strip()]
    return space


def parse_engines(items: list[str]) -> dict[str, dict[str, list[Any]]]:
    """["sglang:max_running_requests=4,8", "sglang:chunked_prefill_size=512,1024", "vllm"] ->
    {"sglang": {"max_running_requests": [4, 8], "chunked_prefill_size": [512, 1024]}, "vllm": {}}."""
    engines: dict[str, dict[str, list[Any]]] = {}
    for item in items:
        engine, _, knob = item.partition(":")
        if not engine.strip():
            raise BadInput(f"--engine {item[:60]!r} is not ENGINE or ENGINE:KNOB=VALUE,VALUE,...")
        space = engines.setdefault(engine.strip(), {})
        if knob.strip():
            for name, values in parse_space([knob]).items():
                if name in space:
                    raise BadInput(f"--engine names {engine.strip()[:40]}:{name[:60]} twice")
                space[name] = values
    return engines


class Command(ActionCommand):
    help = "Tuning runs: a host's best settings found by measuring, proposed as a reviewed revision."

    def add_actions(self, actions: Actions[Any]) -> None:
        start = actions.add_parser("start", help="start a tuning run on a host")
        start.add_argument("--host", required=True)
        start.add_argument("--base", type=ID, default=None, help="the revision to tune from (default: the active one)")
        start.add_argument(
            "--space", action="append", default=[], metavar="KNOB=V1,V2", help="a knob and its values (repeatable)"
        )
        start.add_argument(
            "--engine",
            action="append",
            default=[],
            metavar="ENGINE[:KNOB=V1,V2]",
            help="another engine to try, with a knob and its values (repeatable; a bare ENGINE: at its defaults)",
        )
        start.add_argument("--objective", default="throughput", help="decode, throughput, ttft_p95 or j_per_token")
        start.add_argument("--level", default="", help="the load level judged (default: the profile's last)")
        start.add_argument("--limit", default="", help='hard limits, e.g. "ttft_p95<=500,j_per_token<=base"')
        start.add_argument("--profile", default="quick", help="the benchmark profile each round runs")
        start.add_argument("--trials", type=bounded_int(1, MAX_TRIALS), default=8, help="candidates measured at most")
        start.add_argument("--minutes", type=bounded_int(1, MAX_MINUTES), default=60, help="no candidate starts after")
        start.add_argument("--repeats", type=bounded_int(1, MAX_REPEATS), default=3, help="rounds of the best and base")
        start.add_argument("--repeat-best", type=bounded_int(0, MAX_REPEAT_BEST), default=2, help="the best repeated")
        start.add_argument("--seed", type=bounded_int(0, 2**31 - 1), default=0, help="the sampler's seed")
        add_user_option(start)
        listing = actions.add_parser("list", help="tuning runs, newest first")
        listing.add_argument("--host", default=None)
        status = actions.add_parser("status", help="a run and its trials")
        status.add_argument("id", type=ID)
        cancel = actions.add_parser("cancel", help="stop a run: the host goes back to the base revision")
        cancel.add_argument("id", type=ID)
        add_user_option(cancel)
        propose = actions.add_parser("propose", help="switch to the best trial (a change request where review is on)")
        propose.add_argument("id", type=ID)
        propose.add_argument("--trial", type=bounded_int(1, 10_000), default=None, help="another trial than the best")
        propose.add_argument("--anyway", action="store_true", help="even when it did not beat the base beyond noise")
        propose.add_argument("--review", action="store_true", help="open a change request even where none is required")
        propose.add_argument("--group", default="", help="a host tag: roll the trial's knobs out over those hosts")
        propose.add_argument("--batch-size", type=bounded_int(1, 100), default=1, help="with --group: hosts a wave")
        add_user_option(propose)

    def do_start(self, o: dict[str, Any]) -> None:
        host = get_host(o["host"])
        base = get_revision(host, o["base"]) if o["base"] else None
        try:
            run = tuning_start(
                host=host,
                base=base,
                space=parse_space(o["space"]),
                engines=parse_engines(o["engine"]) or None,
                objective=o["objective"],
                level=o["level"],
                limits=o["limit"],
                profile=o["profile"],
                max_trials=o["trials"],
                max_minutes=o["minutes"],
                repeats=o["repeats"],
                repeat_best=o["repeat_best"],
                seed=o["seed"],
                actor=get_actor(o["user"]),
            )
        except ChangeRequested as exc:
            self.stdout.write(" ".join(exc.messages))
            return
        self._show(self._run(run.pk))

    def do_list(self, o: dict[str, Any]) -> None:
        host = get_host(o["host"]) if o["host"] else None
        for run in selectors.tuning_run_list(host=host):
            best = f"best trial {run.best.number}" if run.best else "no best"
            self.stdout.write(f"#{run.pk}\t{run.host.name}\tr{run.base.number}\t{run.state}\t{best}")

    def do_status(self, o: dict[str, Any]) -> None:
        self._show(self._run(o["id"]))

    def do_cancel(self, o: dict[str, Any]) -> None:
        run = tuning_cancel(run=self._run(o["id"]), actor=get_actor(o["user"]))
        self._show(self._run(run.pk))

    def do_propose(self, o: dict[str, Any]) -> None:
        run = self._run(o["id"])
        trial = None
        if o["trial"] is not None:
            trial = run.trials.filter(number=o["trial"]).first()
            if trial is None:
                raise BadInput(f"Tuning run #{run.pk} has no trial {o['trial']}.")
        proposal = tuning_propose(
            run=run,
            trial=trial,
            anyway=o["anyway"],
            review=o["review"],
            group=o["group"],
            batch_size=o["batch_size"],
            actor=get_actor(o["user"]),
        )
        if proposal.change_request is not None:
            what = f"roll out to {o['group']}" if o["group"] else f"switch to r{proposal.revision.number}"
            self.stdout.write(f"Change request #{proposal.change_request} opened: {what}.")
        elif proposal.rollout is not None:
            self.stdout.write(f"Rollout #{proposal.rollout.pk} of {proposal.rollout.group} started: its canary first.")
        elif proposal.operation is not None:
            self.stdout.write(f"Switching to r{proposal.revision.number}: operation {proposal.operation.pk}.")

    def _run(self, pk: int) -> TuningRun:
        run = TuningRun.objects.filter(pk=pk).first()
        if run is None:
            raise BadInput(f"No tuning run #{pk}.")
        return selectors.tuning_run_get(pk=pk)

    def _show(self, run: TuningRun) -> None:
        self.stdout.write(
            f"Tuning run #{run.pk} on {run.host.name} from r{run.base.number}: {run.get_state_display()}"
            f" ({run.get_stage_display().lower()})"
        )
        if run.reason:
            self.stdout.write(run.reason)
        for trial in selectors.tuning_trials(run=run):
            knobs = ", ".join(f"{k}={v}" for k, v in trial.knobs.items())
            if trial.engine and trial.engine != run.base.engine:
                knobs = f"{trial.engine}: {knobs or 'its defaults'}"
            knobs = knobs or "the base"
            rev = f"r{trial.revision.number}" if trial.revision else "-"
            value = f"{trial.value:.4g}" if trial.value is not None else "-"
            rounds = len(trial.rounds)
            line = f"  {trial.number:>3} {rev:<6} {trial.state:<10} {value:>10} ({rounds} round(s))  {knobs}"
            self.stdout.write(line + (f"  [{trial.reason[:160]}]" if trial.reason else ""))

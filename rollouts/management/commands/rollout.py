"""`manage.py rollout start|list|show|pause|resume|cancel`: rollouts across hosts from a shell.
`start --at TIME` or `--window` schedules it instead (in its canary's maintenance window); over a
host that requires review (`--user` a person) it opens a change request and exits 0."""

from __future__ import annotations

from typing import Any

from deployments.management.cli import (
    ActionCommand,
    Actions,
    BadInput,
    add_gate_options,
    add_user_option,
    bounded_int,
    gate_lines,
    gate_option,
    get_actor,
    parse_pairs,
)
from deployments.services.gates import gate_params
from hardware.review import ChangeRequested
from rollouts import selectors
from rollouts.models import Rollout
from rollouts.services import change_from_input, rollout_cancel, rollout_pause, rollout_resume, rollout_start
from schedules.choices import ChangeKind
from schedules.cli import add_when_options, scheduled_line, when_of
from schedules.services import change_schedule
from serving.rollouts import MAX_BATCH

ID = bounded_int(1, 2**31 - 1)


class Command(ActionCommand):
    help = "Rollouts: one change applied to the hosts of a group (a host tag) in waves, canary first."

    def add_actions(self, actions: Actions[Any]) -> None:
        start = actions.add_parser(
            "start", help="start a rollout over a group: a new revision per host, or an alias move"
        )
        start.add_argument("--group", required=True, help="the host tag")
        start.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE", help="a knob (repeatable)")
        start.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="a variable (repeatable)")
        start.add_argument("--model", default=None, help="move every host to this model (its catalog name)")
        start.add_argument("--message", default="", help="why: each new revision's message")
        start.add_argument("--alias", default="", help="an alias move: the alias ...")
        start.add_argument("--tag", default="", help="... to the revision with this tag on each host")
        start.add_argument("--batch", type=bounded_int(1, MAX_BATCH), default=1, help="hosts per wave after the canary")
        start.add_argument("--canary", default="", help="the host that goes first (default: first by name)")
        add_gate_options(start, what="the canary's switch (the next wave waits for it to pass)")
        add_user_option(start)
        add_when_options(start)
        actions.add_parser("list", help="the rollouts, newest first")
        show = actions.add_parser("show", help="a rollout and each host's state")
        show.add_argument("id", type=ID)
        for action, what in (("pause", "pause before the next wave"), ("resume", "resume"), ("cancel", "cancel")):
            act = actions.add_parser(action, help=what)
            act.add_argument("id", type=ID)
            add_user_option(act)

    def do_list(self, o: dict[str, Any]) -> None:
        for r in selectors.rollout_list():
            done = f"{r.done_count}/{r.host_count}"  # type: ignore[attr-defined]
            self.stdout.write(f"#{r.pk}\t{r.state}\t{r.group}\t{done} done\t{r.describe_change()}")

    def do_start(self, o: dict[str, Any]) -> None:
        try:
            rollout = self._start(o)
        except ChangeRequested as exc:  # a host of the group requires review
            self.stdout.write(" ".join(exc.messages))
            return
        if rollout is not None:
            self._show(self._rollout(rollout.pk))

    def do_show(self, o: dict[str, Any]) -> None:
        self._show(self._rollout(o["id"]))

    def act(self, o: dict[str, Any]) -> None:
        service = {"pause": rollout_pause, "resume": rollout_resume, "cancel": rollout_cancel}[o["action"]]
        rollout = service(rollout=self._rollout(o["id"]), actor=get_actor(o["user"]))
        self._show(self._rollout(rollout.pk))

    do_pause = do_resume = do_cancel = act

    def _start(self, o: dict[str, Any]) -> Rollout | None:
        """The rollout started now, or None when it was scheduled (the line printed)."""
        gate = gate_option(o)
        kind = "alias" if o["alias"] or o["tag"] else "revision"
        change = change_from_input(
            kind,
            knobs=parse_pairs(o["set"], what="--set", typed=True),
            env=parse_pairs(o["env"], what="--env", typed=False),
            model=o["model"],
            message=o["message"],
            alias=o["alias"],
            tag=o["tag"],
        )
        params = {"group": o["group"], "kind": kind, "change": change, "batch_size": o["batch"], "canary": o["canary"]}
        if (later := when_of(o)) is not None:
            scheduled = change_schedule(
                kind=ChangeKind.ROLLOUT,
                host=None,
                params=params | gate_params(gate),
                **later,
                actor=get_actor(o["user"]),
            )
            self.stdout.write(scheduled_line(scheduled))
            return None
        return rollout_start(**params, gate=gate, actor=get_actor(o["user"]))

    def _rollout(self, pk: int) -> Rollout:
        try:
            return selectors.rollout_get(pk=pk)
        except Rollout.DoesNotExist:
            raise BadInput(f"No rollout #{pk}.") from None

    def _show(self, rollout: Rollout) -> None:
        self.stdout.write(f"Rollout #{rollout.pk} of {rollout.group}: {rollout.describe_change()}: {rollout.state}")
        if rollout.error:
            self.stdout.write(rollout.error)
        for part in selectors.rollout_hosts(rollout=rollout):
            wave = "canary" if part.wave == 0 else f"wave {part.wave}"
            self.stdout.write(f"  {wave:<8} {part.host.name:<24} {part.state:<16} {part.message}")
        gate = selectors.rollout_canary_gate(rollout=rollout)
        if gate is not None:
            self.stdout.write(f"Benchmark gate on the canary ({gate.host.name}): {gate.get_state_display()}")
            for line in gate_lines(gate.verdict):
                self.stdout.write(line)

"""`manage.py engine install|read-again|list|first-install`: engines on a host. `install` queues an
install of an engine version (exit 0 when queued, or with --wait when it succeeded; 1 when it failed
or was cancelled; 2 for bad input). `read-again`: the host reads a recorded install's venv again
(after a pip install into it), with the same exits. `list`: the installed engines and versions. `first-install` (what
scripts/run does at a first run): start building llama.cpp on the host in the background while
no host has an engine yet; nothing otherwise."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError

from deployments.choices import Engine, OperationState
from deployments.management import cli
from deployments.models import Operation
from deployments.services.installs import first_install, install_list, install_request, install_reread
from hostagent.probe import local_host_name


class Command(cli.ActionCommand):
    help = __doc__

    def add_actions(self, actions: cli.Actions[Any]) -> None:
        install = cli.host_action(actions, "install", "install an engine version on a host (runs on the host's agent)")
        install.add_argument("--engine", required=True, help=", ".join(Engine.values))
        install.add_argument("--version", default="", help="exact version: 0.22.0 for vLLM/SGLang, b6500 for llama.cpp")
        install.add_argument(
            "--source-dir",
            default=None,
            help="llama.cpp, admin only: build this checkout on the host (in a folder its "
            "CONTROLPANEL_INSTALL_DIRS allows)",
        )
        install.add_argument(
            "--cuda",
            action="store_true",
            default=None,
            help="build with CUDA (default: when the host has NVIDIA GPUs)",
        )
        install.add_argument("--no-cuda", dest="cuda", action="store_false", help="build for the CPU only")
        install.add_argument(
            "--wheelhouse",
            default=None,
            help="air-gapped hosts, admin only: pip installs only from this folder on the host (in a folder its "
            "CONTROLPANEL_INSTALL_DIRS allows)",
        )
        install.add_argument(
            "--existing",
            default=None,
            help="admin only: record a venv already on the host that holds the engine (nothing is installed; "
            "the version is the one it holds; in a folder its CONTROLPANEL_INSTALL_DIRS allows)",
        )
        cli.add_operation_options(install)
        again = cli.host_action(
            actions,
            "read-again",
            "read a recorded install's venv again, after a pip install into it (runs on the host)",
        )
        again.add_argument("--engine", required=True, help=", ".join(Engine.values))
        again.add_argument("--version", required=True, help="the install's version, as `engine list` shows it")
        cli.add_operation_options(again)
        first = actions.add_parser(
            "first-install", help="first run: start building llama.cpp on this machine while no host has an engine"
        )
        first.add_argument("--host", default=None, help="the host (default: this machine, as register-local names it)")
        lst = cli.host_action(actions, "list", "installed engines and versions")
        lst.add_argument("--json", action="store_true")

    def do_install(self, options: dict[str, Any]) -> None:
        host = cli.get_host(options["host"])
        op = install_request(  # a refusal is exit 2 (cli.ActionCommand)
            host=host,
            engine=options["engine"],
            version=options["version"],
            source_dir=options["source_dir"],
            cuda=options["cuda"],
            wheelhouse=options["wheelhouse"],
            existing=options["existing"],
            actor=cli.get_actor(options["user"]),
        )
        version = op.params["version"] or ("(the venv's)" if op.params.get("existing") else "(latest)")
        self._ended(op, f"{op.params['engine']} {version}", "Install", options)

    def do_read_again(self, options: dict[str, Any]) -> None:
        host = cli.get_host(options["host"])
        op = install_reread(
            host=host, engine=options["engine"], version=options["version"], actor=cli.get_actor(options["user"])
        )
        self._ended(op, f"{options['engine']} {options['version']}", "Reading again", options)

    def _ended(self, op: Operation, label: str, what: str, options: dict[str, Any]) -> None:
        """Queued, or with --wait how it ended: exit 1 unless it succeeded."""
        host = op.host.name
        ended = self.queued(op, f"{what} of {label} on {host}", wait=options["wait"], timeout=options["timeout"])
        if ended is None:
            return
        if ended.state == OperationState.SUCCEEDED:
            got = ended.result
            self.stdout.write(
                self.style.SUCCESS(
                    f"{got.get('engine')} {got.get('version')} is installed on {host} at {got.get('path')}."
                )
            )
            return
        raise CommandError(ended.error or f"{what} {ended.state}.", returncode=1)

    def do_first_install(self, options: dict[str, Any]) -> None:
        op, said = first_install(cli.get_host(options["host"] or local_host_name()))
        self.stdout.write(f"First run: {said}." if op else f"Engines: {said}.")

    def do_list(self, options: dict[str, Any]) -> None:
        host = cli.get_host(options["host"])
        rows = install_list(host=host)
        if options["json"]:
            self.stdout.write(json.dumps(rows, indent=2))
            return
        if not rows:
            self.stdout.write(f"No engines installed on {host.name} by the panel.")
            return
        for row in rows:
            self.stdout.write(f"{row['engine']:10} {row['version']:12} {row['installed_at'][:19]}  {row['path']}")

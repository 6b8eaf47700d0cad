from __future__ import annotations

import shlex
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from controlpanel.params import parse_int
from deployments.management.cli import ActionCommand, Actions
from deployments.models import active_revision_of
from hardware.models import GpuType, Host
from hardware.services import host_address_follow_lan, host_address_set, host_declare, host_probe_record
from serving.planner.fit import MAX_GPUS


class Command(ActionCommand):
    help = "Hosts: record this machine or another by hand, list them, issue their agents' tokens and broker users."

    def add_actions(self, actions: Actions[Any]) -> None:
        reg = actions.add_parser("register-local", help="probe this machine (NVML) and record it as a host")
        reg.add_argument("--name", default=None)
        reg.add_argument("--address", default="127.0.0.1", help="default: CONTROLPANEL_LAN_ADDRESS when set")
        actions.add_parser("list", help="name, online, engine, active revision, GPUs")
        adr = actions.add_parser(
            "address", help="set where the panel, the lab router and client exports reach a host (not loopback)"
        )
        adr.add_argument("name")
        adr.add_argument("address")
        dec = actions.add_parser("declare", help="record a host by hand before its agent first reports")
        dec.add_argument("name")
        dec.add_argument("--address", default="127.0.0.1")
        dec.add_argument(
            "--gpu",
            action="append",
            default=[],
            metavar="TYPE:COUNT",
            help="catalog GPU type and count, e.g. 'RTX 3090:6' (repeatable)",
        )
        dec.add_argument(
            "--model-dir",
            action="append",
            default=[],
            metavar="PATH",
            help="a folder its engines may open files in (repeatable); its agent's own list replaces these",
        )

        tag = actions.add_parser("tag", help="print a host's groups (tags), or replace them with the ones given")
        tag.add_argument("name")
        tag.add_argument("tags", nargs="*", metavar="TAG", help="the host's groups from now on")
        tag.add_argument("--clear", action="store_true", help="remove every tag")

        tok = actions.add_parser(
            "token", help="issue the host's agent token (printed once on stdout; earlier tokens are revoked)"
        )
        tok.add_argument("name")
        tok.add_argument("--revoke", action="store_true", help="only revoke the host's tokens, issue none")
        bro = actions.add_parser(
            "broker-user",
            help="print a Redis ACL user for the host's agent (its own queue only) with a new password, "
            "and the broker URL it uses (printed once)",
        )
        bro.add_argument("name")
        bro.add_argument(
            "--url",
            default=None,
            help="the broker as the host reaches it, e.g. redis://panel.lab.example:6379/0 "
            "(default: the panel's CELERY_BROKER_URL, credentials left out)",
        )

    def do_declare(self, o: dict[str, Any]) -> None:
        gpus = []
        for item in o["gpu"]:
            short, _, count_text = item.rpartition(":")
            gpu_type = GpuType.objects.filter(short_name__iexact=short.strip()).first()
            try:
                count = parse_int(count_text, name="COUNT", minimum=0, maximum=MAX_GPUS)
            except ValueError as exc:
                raise CommandError(f"--gpu {item[:80]!r}: {exc}.", returncode=2) from None
            if gpu_type is None:
                known = ", ".join(GpuType.objects.values_list("short_name", flat=True))
                raise CommandError(f"--gpu {item[:80]!r}: use TYPE:COUNT with a catalog type ({known}).", returncode=2)
            gpus.append((gpu_type, count))
        if sum(count for _, count in gpus) > MAX_GPUS:
            raise CommandError(f"At most {MAX_GPUS} GPUs on one host.", returncode=2)
        try:
            host = host_declare(name=o["name"], address=o["address"], gpus=gpus, model_dirs=o["model_dir"], actor=None)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages), returncode=2) from exc
        self.stdout.write(f"Declared host {host.name} with {host.gpus.count()} GPU(s); queue {host.queue}.")

    def do_address(self, o: dict[str, Any]) -> None:
        host = Host.objects.filter(name=o["name"]).first()
        if host is None:
            raise CommandError(f"No host named {o['name'][:80]!r}.", returncode=2)
        try:
            host = host_address_set(host=host, address=o["address"], actor=None)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages), returncode=2) from exc
        self.stdout.write(f"{host.name}'s address is {host.address}.")

    def do_tag(self, o: dict[str, Any]) -> None:
        from hardware.services import host_tag_names, host_tags_set

        name, tags, clear = o["name"], o["tags"], o["clear"]
        host = Host.objects.filter(name=name).first()
        if host is None:
            raise CommandError(f"No host named {name[:80]!r}.", returncode=2)
        if tags or clear:
            try:
                host_tags_set(host=host, tags=[] if clear else tags, actor=None)
            except ValidationError as exc:
                raise CommandError("; ".join(exc.messages), returncode=2) from exc
        self.stdout.write(" ".join(host_tag_names(host)))

    def do_token(self, o: dict[str, Any]) -> None:
        """The token alone on stdout (so `TOKEN=$(manage.py host token NAME)` works), the rest on stderr."""
        from hardware.credentials import host_token_issue, host_token_revoke

        name, revoke = o["name"], o["revoke"]
        try:
            if revoke:
                host = Host.objects.filter(name=name).first()
                if host is None:
                    raise CommandError(f"No host named {name[:80]!r}.", returncode=2)
                count = host_token_revoke(host=host, actor=None)
                self.stderr.write(f"Revoked {count} token(s) of {host.name}: its agent is refused from now on.")
                return
            host, token = host_token_issue(name=name, actor=None)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages), returncode=2) from exc
        self.stderr.write(
            f"New agent token for {host.name} (queue {host.queue}); earlier tokens are revoked. "
            "It is shown only now: give it to the agent on its standard input (CONTROLPANEL_HOST_TOKEN_FILE=-), "
            "in a 0600 token file or as CONTROLPANEL_HOST_TOKEN."
        )
        self.stdout.write(token)

    def do_broker_user(self, o: dict[str, Any]) -> None:
        """The ACL lines and the host's broker URL on stdout (the password is in the URL only: the
        ACL lines hold its SHA-256); how to use them on stderr."""
        from django.conf import settings

        from controlpanel.broker import without_credentials
        from hardware.credentials import host_broker_user_issue

        name, url = o["name"], o["url"]
        base = url or without_credentials(settings.CELERY_BROKER_URL)
        try:
            host, user = host_broker_user_issue(name=name, broker_url=base, actor=None)
        except ValidationError as exc:
            hint = " Pass --url: the broker as the host reaches it." if "url" in exc.message_dict and not url else ""
            raise CommandError("; ".join(exc.messages) + hint, returncode=2) from exc
        self.stderr.write(
            f"Broker user {user.name} for {host.name}: it may consume its queue {host.queue} and nothing else. "
            "Add the users.acl line to the file your Redis loads (--aclfile) and run `ACL LOAD`, or run the "
            "ACL SETUSER line (then `ACL SAVE` with an aclfile); a new line replaces the user's old password. "
            "Give the host the URL as CELERY_BROKER_URL: it is shown only now."
        )
        self.stdout.write("# users.acl")
        self.stdout.write(user.acl_line)
        self.stdout.write("# redis-cli (quoted for a shell and for redis-cli's prompt alike)")
        self.stdout.write(shlex.join(user.setuser))
        self.stdout.write(f"# CELERY_BROKER_URL of {host.name}")
        self.stdout.write(user.url)

    def do_register_local(self, o: dict[str, Any]) -> None:
        """This machine, probed here (the embedded default, where the panel and the host are one)."""
        from hostagent.probe import local_host_name, probe_local

        probe = probe_local(address=o["address"])
        facts, inventory = dict(probe.facts), dict(probe.inventory)
        host = host_probe_record(name=o["name"] or local_host_name(), facts=facts, inventory=inventory)
        try:
            if o["address"] != host.address and o["address"] != "127.0.0.1":  # given here: the admin's own
                host = host_address_set(host=host, address=o["address"], actor=None)
            elif o["address"] == "127.0.0.1":  # not given: CONTROLPANEL_LAN_ADDRESS, when set
                host = host_address_follow_lan(host)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages), returncode=2) from exc
        gpus = host.gpus.count()
        kind = f"{gpus} GPU(s)" if gpus else f"CPU-only ({inventory.get('reason') or 'no NVIDIA driver'})"
        self.stdout.write(f"Registered host {host.name} (queue {host.queue}): {kind}.")
        for m in host.probe_mismatches:
            self.stdout.write(self.style.WARNING(f"  mismatch: {m}"))

    def do_list(self, o: dict[str, Any]) -> None:
        hosts = Host.objects.select_related("deployment__active_revision__model_variant").prefetch_related("gpus")
        if not hosts:
            raise CommandError("No hosts yet.")
        self.stdout.write(f"{'NAME':<20} {'ONLINE':<7} {'ENGINE':<16} {'ACTIVE':<8} GPUS")
        for h in hosts:
            rev = active_revision_of(h)
            engine = f"{rev.engine} {rev.engine_version}".strip() if rev else "-"
            gpus = ", ".join(g.name for g in h.gpus.all()) or "none"
            active = f"r{rev.number}" if rev else "-"
            self.stdout.write(f"{h.name:<20} {'yes' if h.is_online else 'no':<7} {engine:<16} {active:<8} {gpus}")

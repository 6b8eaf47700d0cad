"""`manage.py restore DIR [--force]`: restore a backup folder made by `manage.py backup`. Checks its
manifest and checksums, refuses migrations this panel does not know and a database that already
holds history (unless --force), then restores the database and the secret key. Stop the panel's
processes first (core/backup.py; docs/production.md, "Backups")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.audit import audit_record
from core.backup import BackupError, backup_restore
from core.context import change_context


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("source", type=Path, help="the backup folder (controlpanel-backup-...)")
        parser.add_argument("--force", action="store_true", help="replace a database that already holds history")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            done = backup_restore(source=Path(options["source"]).absolute(), force=options["force"])
        except (BackupError, OSError) as exc:
            raise CommandError(f"Restore failed: {exc}") from exc
        with change_context("cli"):  # the restored history says where it came from
            audit_record(
                action="backup.restore",
                summary=f"restored the backup of {done['created_at']} ({done['database']['method']})",
                data={"panel_version": done["panel_version"], "migration_heads": done["migration_heads"]},
                actor=None,
            )
        self.stdout.write(
            f"Restored the backup of {done['created_at']} "
            f"(panel {done['panel_version']}, {done['database']['method']}): "
            f"{done['restored_rows']:,} rows in {done['restored_tables']} tables, each as many as the manifest "
            f"counted, in {done['seconds']:.2f} s."
        )
        if done["migrated_forward"]:
            self.stdout.write("It was made at older migrations: it has been migrated forward to this panel's.")
        if done["key_written"]:
            self.stdout.write(f"The backup's secret key is back in {done['key_written']}.")
        self.stdout.write("Start the panel again (./scripts/run, or docker compose up -d).")

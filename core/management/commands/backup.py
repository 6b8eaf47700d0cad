"""`manage.py backup [--output DIR]`: back up the panel: a consistent snapshot of the database, its
secret key and a manifest (versions, migrations, row counts, checksums), as one folder under
--output (default: DATA_DIR/backups). core/backup.py; docs/production.md, "Backups"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.backup import BackupError, backup_create


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", type=Path, default=None, help="the folder to write the backup folder in")

    def handle(self, *args: Any, **options: Any) -> None:
        output = Path(options["output"] or Path(settings.DATA_DIR) / "backups")
        try:
            folder, manifest = backup_create(output=output.absolute())
        except (BackupError, OSError) as exc:
            raise CommandError(f"Backup failed: {exc}") from exc
        database = manifest["database"]
        self.stdout.write(
            f"Backed up {database['vendor']} ({database['method']}, {sum(manifest['row_counts'].values()):,} rows in "
            f"{len(manifest['row_counts'])} tables) and the secret key in {manifest['seconds']:.2f} s to {folder}"
        )
        self.stdout.write("It holds the key that decrypts the panel's secrets: keep it as private as the panel itself.")

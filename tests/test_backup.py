"""`manage.py backup` and `manage.py restore` on PostgreSQL (both ways: pg_dump's custom format, and
the Django-level dump used where pg_dump is not installed, as in the Docker image): the restored
panel shows the same history and decrypts its secrets; a damaged backup, a foreign key in the
environment and a database that already holds history are refused with one clear sentence and
nothing changed. tests/test_backup_sqlite.py does the embedded default."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection

from tests.support.history import build_history, fingerprint

pytestmark = pytest.mark.django_db(transaction=True)


def _backup(tmp_path: Path) -> Path:
    call_command("backup", output=str(tmp_path / "backups"))
    (folder,) = (tmp_path / "backups").iterdir()
    return folder


def _restored(before: dict, manifest: dict) -> dict:
    """The history as it was, and the restore's own audit event after it."""
    summary = f"restored the backup of {manifest['created_at']} ({manifest['database']['method']})"
    event = ("backup.restore", summary, None)
    return {**before, "audit": [*before["audit"], event]}


@pytest.fixture
def key_file(tmp_path: Path, settings) -> Path:
    """The embedded default's key file, holding the key the panel runs with."""
    path = tmp_path / "secret_key"
    path.write_text(settings.SECRET_KEY)
    settings.SECRET_KEY_FILE = path
    return path


@pytest.mark.parametrize("pg_dump", [True, False], ids=["pg_dump", "django-dump"])
def test_a_restore_into_an_emptied_panel_brings_back_the_history_and_its_secrets(
    tmp_path, settings, key_file, monkeypatch, pg_dump
):
    if not pg_dump:
        monkeypatch.setattr("core.backup_db.shutil.which", lambda name: None)
    before = build_history()
    folder = _backup(tmp_path)

    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["database"] == {
        "vendor": "postgresql",
        "method": "pg_dump" if pg_dump else "django-dumpdata",
        "file": "db.pgdump" if pg_dump else "db.json",
    }
    assert manifest["row_counts"]["deployments_auditevent"] == len(before["audit"])
    assert f"deployments.{manifest['migration_heads']['deployments']}" in manifest["migrations"]
    assert set(manifest["files"]) == {manifest["database"]["file"], "secret_key"}
    for name in [*manifest["files"], "manifest.json"]:
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
    assert (folder / "secret_key").read_text().strip() == settings.SECRET_KEY

    # A new machine: its own key (the embedded file), an empty database.
    old_key = settings.SECRET_KEY
    settings.SECRET_KEY = "another-installations-key"
    key_file.write_text(settings.SECRET_KEY)
    call_command("flush", interactive=False, verbosity=0)
    call_command("restore", str(folder))

    assert key_file.read_text().strip() == old_key  # the backup's key is back where the panel reads it
    settings.SECRET_KEY = old_key
    assert fingerprint() == _restored(before, manifest)
    assert all(h["secrets_decrypt"] == ["api", "hf"] for h in before["hosts"].values())


def test_a_restore_refuses_a_panel_with_history_and_replaces_it_when_forced(tmp_path, key_file):
    before = build_history()
    folder = _backup(tmp_path)
    User.objects.create_user(username="made-after-the-backup")

    with pytest.raises(CommandError, match=r"already holds history \(.*users.*\): a restore replaces all of it"):
        call_command("restore", str(folder))
    assert User.objects.filter(username="made-after-the-backup").exists()  # nothing changed

    call_command("restore", str(folder), force=True)
    assert fingerprint() == _restored(before, json.loads((folder / "manifest.json").read_text()))
    assert not User.objects.filter(username="made-after-the-backup").exists()


def test_a_damaged_foreign_or_unreadable_backup_is_refused_before_anything_changes(tmp_path, settings, key_file):
    build_history()
    folder = _backup(tmp_path)
    call_command("flush", interactive=False, verbosity=0)

    db_file = next(p for p in folder.iterdir() if p.name.startswith("db."))
    good = db_file.read_bytes()
    damaged = bytearray(good)
    damaged[len(damaged) // 2] ^= 0xFF
    db_file.write_bytes(bytes(damaged))
    with pytest.raises(CommandError, match="does not match its checksum in the manifest"):
        call_command("restore", str(folder))
    db_file.write_bytes(good)

    with pytest.raises(CommandError, match="is not a backup of the panel: it has no manifest.json"):
        call_command("restore", str(tmp_path))

    settings.SECRET_KEY = "set-by-DJANGO_SECRET_KEY"  # not the key file's: it comes from the environment
    with pytest.raises(CommandError, match="DJANGO_SECRET_KEY differs from the backup's key: set it to the key in"):
        call_command("restore", str(folder))
    settings.SECRET_KEY = key_file.read_text()

    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["migrations"].append("deployments.9999_from_the_future")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CommandError, match="made by a panel ahead of this one .*9999_from_the_future unknown here"):
        call_command("restore", str(folder))

    assert not User.objects.exists()  # nothing was restored, nothing was dropped
    with connection.cursor() as cursor:
        assert "deployments_deploymentrevision" in connection.introspection.table_names(cursor)


def test_a_manifest_that_points_outside_the_folder_or_at_an_unlisted_file_is_refused_and_nothing_changes(
    tmp_path, key_file
):
    """The attack: a manifest edited to restore the database from `../x`, `/etc/passwd` or a file it
    does not checksum (each with a checksum that matches, as an attacker who edits the manifest
    writes it). Each is refused before anything changes; the untouched backup then restores."""
    before = build_history()
    folder = _backup(tmp_path)
    call_command("flush", interactive=False, verbosity=0)
    good = (folder / "manifest.json").read_text()
    db_name = json.loads(good)["database"]["file"]
    outside = tmp_path / "x"
    outside.write_bytes((folder / db_name).read_bytes())  # a valid dump, right beside the folder
    facts = json.loads(good)["files"][db_name]

    def edited(file: str, listed: str | None = None) -> None:
        manifest = json.loads(good)
        manifest["database"]["file"] = file
        if listed is not None:
            manifest["files"][listed] = facts
        (folder / "manifest.json").write_text(json.dumps(manifest))

    outside_the_folder = "is not a file name inside the backup folder"
    for file, listed, words in [
        ("../x", "../x", outside_the_folder),
        (str(outside), str(outside), outside_the_folder),
        ("/etc/passwd", None, outside_the_folder),
        ("sub/db.pgdump", None, outside_the_folder),
        ("db.other", None, "is not among the files it lists with a checksum"),
    ]:
        edited(file, listed)
        with pytest.raises(CommandError, match=words):
            call_command("restore", str(folder))

    # A file the manifest does not list, beside the ones it does (SQLite would roll a hot journal in).
    (folder / "manifest.json").write_text(good)
    (folder / f"{db_name}-journal").write_bytes(b"not in the manifest")
    with pytest.raises(CommandError, match=f"{db_name}-journal is in the backup folder but not in its manifest"):
        call_command("restore", str(folder))
    (folder / f"{db_name}-journal").unlink()

    # A listed file swapped for a link to one outside, or listed without its checksum.
    (folder / db_name).rename(tmp_path / "kept")
    (folder / db_name).symlink_to(outside)
    with pytest.raises(CommandError, match="is not a plain file"):
        call_command("restore", str(folder))
    (folder / db_name).unlink()
    (tmp_path / "kept").rename(folder / db_name)
    manifest = json.loads(good)
    del manifest["files"][db_name]["sha256"]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CommandError, match=f"lists {db_name} without its size and sha256"):
        call_command("restore", str(folder))

    assert not User.objects.exists()  # nothing was restored, nothing was dropped
    with connection.cursor() as cursor:
        assert "deployments_deploymentrevision" in connection.introspection.table_names(cursor)

    (folder / "manifest.json").write_text(good)
    call_command("restore", str(folder))
    assert fingerprint() == _restored(before, json.loads(good))

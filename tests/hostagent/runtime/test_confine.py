"""The host's own check before an engine starts: paths resolved with symlinks followed must
land inside the model folders this agent was configured with."""

from __future__ import annotations

import os

import pytest

from hostagent.runtime.confine import PathOutsideModelFolders, confine, model_dirs_from_env, working_folder


@pytest.fixture
def folders(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / "q.gguf").write_bytes(b"GGUF")
    secret = tmp_path / "secret_key"
    secret.write_text("panel secret")
    return models, secret


def test_a_file_inside_the_model_folder_passes(folders):
    models, _ = folders
    confine([("model", str(models / "q.gguf"))], [str(models)], cwd=str(models))


def test_a_symlink_that_leads_outside_is_refused_naming_where_it_leads(folders):
    models, secret = folders
    os.symlink(secret, models / "innocent.gguf")
    with pytest.raises(PathOutsideModelFolders) as exc:
        confine([("mmproj", str(models / "innocent.gguf"))], [str(models)], cwd=None)
    assert "mmproj" in exc.value.reason and str(secret) in exc.value.reason and "not started" in exc.value.reason


def test_a_symlinked_subfolder_that_leads_outside_is_refused(folders, tmp_path):
    models, _ = folders
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.gguf").write_bytes(b"GGUF")
    os.symlink(outside, models / "sub")
    with pytest.raises(PathOutsideModelFolders):
        confine([("model", str(models / "sub" / "x.gguf"))], [str(models)], cwd=None)


def test_a_bare_name_is_read_in_the_working_folder(folders):
    models, secret = folders
    confine([("model", "q.gguf")], [str(models)], cwd=working_folder([str(models)]))
    os.symlink(secret, models / "evil.gguf")
    with pytest.raises(PathOutsideModelFolders):
        confine([("model", "evil.gguf")], [str(models)], cwd=str(models))


def test_a_model_folder_that_is_itself_a_symlink_still_counts(folders, tmp_path):
    models, _ = folders
    os.symlink(models, tmp_path / "link-to-models")
    confine([("model", str(tmp_path / "link-to-models" / "q.gguf"))], [str(tmp_path / "link-to-models")], cwd=None)


def test_no_model_folders_means_no_files(folders):
    models, _ = folders
    with pytest.raises(PathOutsideModelFolders, match="no model folders"):
        confine([("model", str(models / "q.gguf"))], [], cwd=None)


def test_model_folders_come_from_the_agents_environment(tmp_path):
    assert model_dirs_from_env({"CONTROLPANEL_MODEL_DIRS": "/srv/models:/data/gguf/"}, data_dir="/x") == [
        "/srv/models",
        "/data/gguf",
    ]
    default = model_dirs_from_env({}, data_dir="/var/lib/panel")
    assert default[0] == "/var/lib/panel/models"
    with pytest.raises(Exception, match="absolute"):
        model_dirs_from_env({"CONTROLPANEL_MODEL_DIRS": "models"}, data_dir="/x")

"""An install step runs a package's build code as the agent's user: it gets the host's
allowlisted environment (hostagent.runtime.childenv), never the agent's token or broker URL."""

from __future__ import annotations

import json
import sys

from hostagent.runtime.installs import run_install
from serving.engines.base import InstallStep

TOKEN = "cph_ThIsIsTheAgentsOwnTokEn0123456789abcdef"
AGENT = {
    "CONTROLPANEL_HOST_TOKEN": TOKEN,
    "SOME_RANDOM_VAR": "random",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    "CELERY_BROKER_URL": "redis://:broker-pass@panel.lab.example:6379/0",
}


def test_an_install_step_never_sees_the_agents_token(tmp_path, monkeypatch):
    for name in ("CONTROLPANEL_HOST_TOKEN", "SOME_RANDOM_VAR", "AWS_SECRET_ACCESS_KEY", "CELERY_BROKER_URL"):
        monkeypatch.setenv(name, AGENT[name])
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    step = InstallStep((sys.executable, "-c", code), "print the environment", env={"CMAKE_ARGS": "-DGGML_NATIVE=OFF"})
    lines: list[str] = []
    result = run_install([step], log_path=tmp_path / "log", on_line=lambda p: lines.append(p.line))
    assert result.ok, result.reason
    seen = json.loads(next(line for line in lines if line.startswith("{")))
    assert seen["CMAKE_ARGS"] == "-DGGML_NATIVE=OFF" and seen["PYTHONUNBUFFERED"] == "1" and "PATH" in seen
    assert not {"CONTROLPANEL_HOST_TOKEN", "SOME_RANDOM_VAR", "AWS_SECRET_ACCESS_KEY", "CELERY_BROKER_URL"} & set(seen)
    assert TOKEN not in (tmp_path / "log").read_text()

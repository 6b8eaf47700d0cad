"""What a process the agent starts sees of the agent's environment: an allowlist, never a copy.
The agent's environment holds its host token and the broker URL; an engine (or an install step
running a package's build code) that could read them could read its host's launches and secrets
and forge results (issue 24)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hostagent.runtime.childenv import PASS_ENV, child_env, engine_env
from hostagent.runtime.strays import ENGINE_OWNER_ENV
from serving.engines.envpolicy import pass_list

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "cph_ThIsIsTheAgentsOwnTokEn0123456789abcdef"
AGENT = {
    # what the host needs, handed on
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/home/lab",
    "USER": "lab",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "TMPDIR": "/scratch/tmp",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
    "HF_HOME": "/models/hf",
    "HF_ENDPOINT": "https://hf-mirror.lab.example",
    "https_proxy": "http://proxy.lab.example:3128",
    # what it must not
    "CONTROLPANEL_HOST_TOKEN": TOKEN,
    "CONTROLPANEL_URL": "https://panel.lab.example",
    "CONTROLPANEL_HOST_TOKEN_FILE": "/etc/controlpanel/host_token",
    "CELERY_BROKER_URL": "redis://:broker-pass@panel.lab.example:6379/0",
    "DATABASE_URL": "postgres://panel:pw@db/panel",
    "DJANGO_SETTINGS_MODULE": "controlpanel.settings_agent",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    "SOME_RANDOM_VAR": "random",
    "HF_TOKEN": "hf_hostwidetoken",
    "PYTHONPATH": "/opt/panel",
    "VIRTUAL_ENV": "/opt/panel/.venv",
    "LD_PRELOAD": "/opt/odd.so",
    "PIP_FIND_LINKS": "/tmp/wheels",
}
KEPT = {
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "LD_LIBRARY_PATH",
    "HF_HOME",
    "HF_ENDPOINT",
    "https_proxy",
}


def test_a_child_gets_what_the_host_needs_and_nothing_else():
    env = child_env(environ=AGENT)
    assert set(env) == KEPT
    assert all(env[k] == AGENT[k] for k in KEPT)
    assert TOKEN not in json.dumps(env)


def test_an_engine_gets_its_revisions_own_variables_and_the_owner_marker_only():
    env = engine_env(
        {"OMP_NUM_THREADS": "4", "CUDA_VISIBLE_DEVICES": "1"}, owner="/var/lib/panel/hosts/a", environ=AGENT
    )
    assert env["OMP_NUM_THREADS"] == "4" and env["CUDA_VISIBLE_DEVICES"] == "1"  # the revision's wins
    assert [k for k in env if k.startswith("CONTROLPANEL_")] == [ENGINE_OWNER_ENV]
    assert env[ENGINE_OWNER_ENV] == "/var/lib/panel/hosts/a"  # a folder's path, not a secret
    assert set(env) == KEPT | {"OMP_NUM_THREADS", ENGINE_OWNER_ENV}


def test_nothing_named_controlpanel_crosses_even_when_asked_for():
    agent = {**AGENT, PASS_ENV: "HF_TOKEN MY_SITE_*", "MY_SITE_MIRROR": "m", "controlpanel_host_token": TOKEN}
    env = child_env({"CONTROLPANEL_HOST_TOKEN": TOKEN, "CONTROLPANEL_ENGINE_OWNER": "/elsewhere"}, environ=agent)
    assert env["HF_TOKEN"] == "hf_hostwidetoken" and env["MY_SITE_MIRROR"] == "m"  # the host's own additions
    assert not [k for k in env if k.upper().startswith("CONTROLPANEL_")]
    assert TOKEN not in json.dumps(env)


@pytest.mark.parametrize("entry", ["CONTROLPANEL_HOST_TOKEN", "CONTROLPANEL_*", "controlpanel_url", "A B;C", "*", "1X"])
def test_a_bad_pass_list_entry_is_refused_by_name(entry):
    with pytest.raises(ValueError, match="CONTROLPANEL_|not a variable name"):
        pass_list(f"HF_TOKEN, {entry}")


def test_the_agent_refuses_to_start_with_a_bad_pass_list():
    from hostagent.agent import AgentConfigError, connect

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(PASS_ENV, "HF_TOKEN,CONTROLPANEL_HOST_TOKEN")
        with pytest.raises(AgentConfigError, match="CONTROLPANEL_PASS_ENV: 'CONTROLPANEL_HOST_TOKEN'"):
            connect(name=None)


FORGET = """
import json, os, subprocess, sys
from hostagent.runtime.childenv import forget_variable
forget_variable("CONTROLPANEL_HOST_TOKEN")
child = subprocess.run(["env"], capture_output=True, text=True).stdout  # inherits the C environment
proc = open("/proc/self/environ", "rb").read().decode(errors="replace")
inherited = "CONTROLPANEL_HOST_TOKEN" in os.environ
print(json.dumps({"proc": proc, "os": inherited, "child": child, "url": os.environ["CONTROLPANEL_URL"]}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/<pid>/environ is Linux's")
def test_a_forgotten_variable_is_gone_from_proc_environ_too():
    """What the agent does with its token once read: /proc/<pid>/environ shows the environment a
    process was exec'd with, whatever os.environ says later, and any process of the same user
    (its engines) may read it."""
    env = {"PATH": AGENT["PATH"], "CONTROLPANEL_HOST_TOKEN": TOKEN, "CONTROLPANEL_URL": "http://panel"}
    out = subprocess.run([sys.executable, "-c", FORGET], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    assert TOKEN not in seen["proc"] and "CONTROLPANEL_HOST_TOKEN" not in seen["proc"]
    assert not seen["os"] and TOKEN not in seen["child"]
    assert "CONTROLPANEL_URL=http://panel" in seen["proc"] and seen["url"] == "http://panel"  # the rest is intact

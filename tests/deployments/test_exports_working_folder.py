"""The exported start script and systemd unit run where the agent runs the engine (issue 41): in
the host's first model folder, so a bare file name such as `--chat-template-file gemma3.jinja`
(as the docs invite) is read there and not from wherever a person happens to start the script.

The script really runs, from `/`, with the real llama-server and the real Gemma 270M GGUF (which
has no chat template of its own): it serves a chat formatted by the template file it was named.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request

import pytest

from deployments.models import ModelVariant
from deployments.services.exports import revision_export
from deployments.services.installs import install_record
from hostagent.runtime.confine import working_folder as agents_working_folder
from tests.hardware.factories import HostFactory
from tests.support.client_tools import systemd_analyze
from tests.support.llama import (
    GEMMA_CHAT_TEMPLATE,
    free_port,
    gemma_package_path,
    llama_server_binary,
    wait_llama_ready,
)
from tests.support.revisions import make_revision

pytestmark = pytest.mark.django_db


@pytest.fixture
def revision(catalog, tmp_path):
    """A llama.cpp revision of the GGUF with `chat_template_file: gemma3.jinja`, on a host whose
    first model folder holds that file (the GGUF lies in its second folder)."""
    models = tmp_path / "my models"  # a space: the script's `cd` must quote it
    models.mkdir()
    (models / "gemma3.jinja").write_text(GEMMA_CHAT_TEMPLATE)
    gguf = gemma_package_path()
    host = HostFactory(name="box", model_dirs=[str(models), os.path.dirname(gguf)])
    install_record(host=host, engine="llama.cpp", version="", path=os.path.dirname(llama_server_binary()),
                   binary=llama_server_binary())  # fmt: skip
    variant = ModelVariant.objects.create(name="gemma-plain", format="gguf", gguf_file=gguf)
    return make_revision(
        host=host,
        engine="llama.cpp",
        model_variant=variant,
        served_name="gemma",
        port=free_port(),
        knobs={"ctx_size": 1024, "parallel": 1, "n_gpu_layers": 0, "threads": 1, "chat_template_file": "gemma3.jinja"},
        message="a bare template name",
        actor=None,
    )


def test_the_start_script_run_from_root_reads_a_bare_template_name_in_the_model_folder(revision, tmp_path):
    models = revision.host.model_dirs[0]
    script = tmp_path / "start.sh"
    script.write_text(revision_export(revision, "start-script").content)
    text = script.read_text()
    assert f"cd '{models}'" in text and "--chat-template-file gemma3.jinja" in text
    assert agents_working_folder(revision.host.model_dirs) == models  # where the agent starts the engine too

    log = tmp_path / "engine.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(  # noqa: S603 - the script we exported, running the real llama-server
            ["/bin/bash", str(script)], cwd="/", env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_llama_ready(revision.port, process, log, timeout=15)
        body = json.dumps({"model": "gemma", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1})
        request = urllib.request.Request(
            f"http://127.0.0.1:{revision.port}/apply-template", data=body.encode(), method="POST",
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            prompt = json.loads(answer.read())["prompt"]
        assert "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n" in prompt  # gemma3.jinja's format
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    assert "failed to open" not in log.read_text()


def test_the_unit_works_in_the_same_folder_and_systemd_accepts_it(revision, tmp_path):
    analyze = systemd_analyze()
    content = revision_export(revision, "systemd").content
    assert f"WorkingDirectory={revision.host.model_dirs[0]}" in content.splitlines()
    unit = tmp_path / "llamacpp.service"
    unit.write_text(content)
    done = subprocess.run(  # noqa: S603 - the real systemd-analyze
        [analyze, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr

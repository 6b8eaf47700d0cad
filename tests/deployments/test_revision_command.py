"""`manage.py revision list/show/diff` on the seed labs' recorded history."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from deployments.services.demo import demo_load

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_diff_between_model_generations_reads_like_the_seed(catalog):
    demo_load()
    text = run("revision", "diff", "--host", "demo-2x5060ti", "2", "3")
    assert "Qwen3.6-35B-A3B-AWQ-4bit" in text and "Qwen3.8-27B-W4A16-AWQ" in text
    assert "max_num_seqs" in text and "8" in text and "4" in text
    assert "262,144" in text or "262144" in text
    assert "qwen3_coder" in text
    # A token *count* is not a credential: it is shown, not masked.
    assert any("--max-num-batched-tokens" in line and "4096" in line for line in text.splitlines())


def test_list_and_show(catalog):
    demo_load()
    listing = run("revision", "list", "--host", "demo-6x3090")
    assert listing.count("\n") == 3 and "* r3" in listing and "daily-driver" in listing
    shown = run("revision", "show", "--host", "demo-6x3090", "1")
    assert "--tensor-parallel-size 4" in shown and "CUDA_VISIBLE_DEVICES=1,2,3,4" in shown
    with pytest.raises(CommandError) as exc:
        run("revision", "show", "--host", "demo-6x3090", "9")
    assert exc.value.returncode == 2


def test_show_prints_the_command_line_the_host_runs(catalog):
    """The address is the one the host reports its engines bind, as on the revision page (it
    printed the panel's own 0.0.0.0 default while the process ran --host 127.0.0.1)."""
    from hardware.models import Host

    demo_load()
    host = Host.objects.get(name="demo-6x3090")
    host.engine_state = {**(host.engine_state or {}), "bind_host": "10.1.2.3"}
    host.save(update_fields=["engine_state"])
    command = next(
        line for line in run("revision", "show", "--host", host.name, "1").splitlines() if line.startswith("command:")
    )
    assert "--host 10.1.2.3" in command and "0.0.0.0" not in command

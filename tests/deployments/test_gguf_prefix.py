"""A GGUF header read from the first bytes of the file (what an import by repository id fetches
by HTTP ranges): the same facts as from the whole file, a truncated prefix says "read more", and
a file that is not GGUF is refused at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.importers.gguf_header import (
    GgufHeaderError,
    GgufTruncated,
    read_gguf_header,
    read_gguf_header_bytes,
)
from tests.support.llama import gemma_model_path


def test_the_first_mebibytes_give_the_whole_files_facts():
    path = Path(gemma_model_path())
    whole = read_gguf_header(path)
    with path.open("rb") as handle:
        prefix = handle.read(8 * 2**20)
    remote = read_gguf_header_bytes(prefix, name=path.name, file_size=path.stat().st_size)
    assert remote == whole
    assert remote.arch.num_layers == 18 and remote.file_type_name == "Q4_K_M"


def test_a_prefix_that_ends_inside_the_header_asks_for_more():
    path = Path(gemma_model_path())
    with path.open("rb") as handle:
        prefix = handle.read(2**20)  # the 262k-token vocabulary runs past the first MiB
    with pytest.raises(GgufTruncated):
        read_gguf_header_bytes(prefix, name=path.name, file_size=path.stat().st_size)


def test_bytes_that_are_not_gguf_are_refused_not_read_on():
    with pytest.raises(GgufHeaderError) as refused:
        read_gguf_header_bytes(b"<html>Not Found</html>" * 100, name="x.gguf", file_size=2200)
    assert not isinstance(refused.value, GgufTruncated)
    assert "no GGUF magic" in str(refused.value)

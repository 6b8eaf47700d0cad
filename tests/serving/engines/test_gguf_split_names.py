"""llama.cpp's split GGUF names (gguf-split: NAME-00001-of-00003.gguf), read in one place for the
importers, the host's model folders and the adapters."""

from __future__ import annotations

import pytest

from serving.engines.base import gguf_split_part


def test_a_part_names_its_siblings_as_it_spells_itself():
    part = gguf_split_part("models/Qwen3-235B-Q4_K_M-00002-of-00003.gguf")
    assert part is not None and (part.prefix, part.part, part.total, part.first) == (
        "models/Qwen3-235B-Q4_K_M",
        2,
        3,
        False,
    )
    upper = gguf_split_part("M-00001-OF-00002.GGUF")
    assert upper is not None and upper.names() == ("M-00001-OF-00002.GGUF", "M-00002-OF-00002.GGUF")


@pytest.mark.parametrize(
    "name", ["m-00001-of-00000.gguf", "m-00000-of-00002.gguf", "m-00003-of-00002.gguf", "m.gguf", "m-1-of-2.gguf"]
)
def test_numbers_no_split_has_are_no_split(name):
    """A hub listing with such a name (part 0, a part past the total, no total) is a file like any
    other, not a split whose parts the import would look for (it raised IndexError)."""
    assert gguf_split_part(name) is None

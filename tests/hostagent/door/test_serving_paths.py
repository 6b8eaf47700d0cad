"""The agent's routing table says which API paths each model's engine serves: its adapter's."""

from __future__ import annotations

from hostagent.door.tables import serving_set
from hostagent.frontdoor.table import RoutingTable
from serving.engines.base import ModelRef
from serving.engines.registry import ADAPTERS
from serving.launch import RevisionSpec
from serving.wire import DoorDocument, DoorModel, RevisionLaunch


def test_each_model_carries_its_engines_paths_from_the_adapter_and_a_hand_written_one_none() -> None:
    spec = RevisionSpec(engine="ollama", version="", model=ModelRef(name="qwen3", format="ollama"), port=8011)
    entry = DoorModel("qwen-r3", RevisionLaunch(id=7, number=3, spec=spec), "on-demand", ("local",))
    (ollama,) = serving_set(DoorDocument("v1", (entry,)).to_dict(), bind_host="127.0.0.1").table.models
    assert ollama.engine == "Ollama" and ollama.paths == ADAPTERS["ollama"].api_paths
    assert ollama.serves("/v1/messages") and not ollama.serves("/v1/messages/count_tokens")
    assert (ollama.upstream, ollama.revision) == ("http://127.0.0.1:8011", "r3")
    # A table written by hand for the door alone (hostagent.frontdoor) says no paths: all pass.
    (by_hand,) = RoutingTable.from_dict({"models": [{"name": "by-hand", "upstream": "http://127.0.0.1:8012"}]}).models
    assert by_hand.paths is None and by_hand.serves("/v1/rerank")  # the engine answers for itself

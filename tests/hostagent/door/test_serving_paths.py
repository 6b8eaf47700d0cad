"""The agent's routing table says which API paths each model's engine serves: its adapter's."""

from __future__ import annotations

from hostagent.door.tables import serving_set
from serving.engines.registry import ADAPTERS


def test_each_model_carries_its_engines_paths_from_the_adapter_and_a_hand_written_one_none() -> None:
    answer = {
        "models": [
            {
                "name": "qwen-r3", "aliases": ["local"], "mode": "on-demand",
                "launch": {"id": 7, "number": 3, "spec": {
                    "engine": "ollama", "version": "", "model": {"name": "qwen3:8b", "format": "ollama"}, "port": 8011,
                }},
            },
            {"name": "by-hand", "upstream": "http://127.0.0.1:8012"},
        ],
    }  # fmt: skip
    table = serving_set(answer, bind_host="127.0.0.1").table
    ollama, by_hand = table.models
    assert ollama.engine == "Ollama" and ollama.paths == ADAPTERS["ollama"].api_paths
    assert ollama.serves("/v1/messages") and not ollama.serves("/v1/messages/count_tokens")
    assert by_hand.paths is None and by_hand.serves("/v1/rerank")  # the engine answers for itself

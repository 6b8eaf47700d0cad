"""A model meant for chat that answers noise fails the switch's verification (the supervisor's test
chat) instead of being reported ready: a GGUF without a chat template (llama.cpp formats the chat as
ChatML and a model trained on another format prints the markers back), and a base model (not
instruction-tuned), which writes the question back under any template. A base model served on purpose
for completions (serving.purpose) is tested with a completion instead.

The package's Gemma 270M GGUF is a base model, shipped without tokenizer.chat_template; the suite's
model (tests.support.llama.gemma_model_path) is the same weights with Gemma's template written in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deployments.importers.gguf_header import read_gguf_header
from hostagent.runtime.errors import EngineVerifyError
from hostagent.runtime.readiness import echoed_marker, repeats_question
from hostagent.runtime.supervisor import Supervisor
from serving.purpose import CHAT, COMPLETIONS
from tests.hostagent.runtime.test_supervisor import llama_spec
from tests.support.llama import free_port, gemma_model_path, gemma_package_path


@pytest.fixture
def sup(tmp_path: Path) -> Iterator[Supervisor]:
    supervisor = Supervisor(tmp_path / "state", stop_grace=5.0)
    yield supervisor
    supervisor.stop(grace=2.0)


def test_the_shipped_gguf_has_no_template_and_the_suites_copy_has_one() -> None:
    assert read_gguf_header(gemma_package_path()).has_chat_template is False
    assert read_gguf_header(gemma_model_path()).has_chat_template is True


def test_the_shipped_gguf_says_it_is_the_base_model_and_the_import_reads_it_so() -> None:
    """Its header names the model (general.name 'Gemma 3 270m', general.basename 'gemma-3') with no
    fine-tune (no general.finetune, as the -it conversion has), no model it derives from and no chat
    template. The suite's copy, with Gemma's template written in, reads as a chat release would: chat."""
    for path, purpose in ((gemma_package_path(), COMPLETIONS), (gemma_model_path(), CHAT)):
        header = read_gguf_header(path)
        assert header.naming.name == "Gemma 3 270m" and header.naming.basename == "gemma-3"
        assert header.naming.finetune is None and header.naming.derived is False
        assert header.naming.has_template is (purpose == CHAT)
        guess = header.purpose(("the file name", Path(path).name))
        assert guess.purpose == purpose
    assert "no fine-tune (general.finetune)" in read_gguf_header(gemma_package_path()).purpose().why
    # The same header under an instruction-tuned file's name is read as that name says.
    tuned_name = ("the file name", "gemma-3-270m-it-Q4_K_M.gguf")
    assert read_gguf_header(gemma_package_path()).purpose(tuned_name).purpose == CHAT


@pytest.mark.parametrize(
    ("answer", "marker"),
    [
        ("Say hello in one word.<|im_end|>\n<|im_", "<|im_end|>"),  # what Gemma 270M answered under ChatML
        ("Say hello in one word.<|im", "<|im_start|>"),  # cut inside the marker by max_tokens
        ("Hello<end_of_turn>\n<start_of_turn>user", "<start_of_turn>"),
        ("[INST] Say hello [/INST]", "[INST]"),
        ("Hello! How can I help?", None),
        ("<h2>The 1000th episode", None),  # gibberish the check does not claim to catch
    ],
)
def test_echoed_markers_are_found(answer: str, marker: str | None) -> None:
    assert echoed_marker(answer) == marker


@pytest.mark.engine
def test_a_gguf_without_a_chat_template_fails_the_switch_verification(sup: Supervisor) -> None:
    spec = llama_spec(free_port(), model=gemma_package_path(), purpose=CHAT)

    with pytest.raises(EngineVerifyError) as caught:
        sup.start(spec, revision_label="r1", ready_timeout=120)

    reason = str(caught.value)
    assert "echoes the chat format's markers" in reason and "<|im_" in reason
    assert "chat_template (one of llama.cpp's built-in templates)" in reason and "chat_template_file" in reason
    assert not sup.status(probe=True).running  # not left serving gibberish


@pytest.mark.parametrize(
    ("answer", "repeats"),
    [
        ("Say hello in one word. mendatang\nSay hello in one word. mendatang\n", True),  # Gemma 3 270M (base)
        ("say hello in one\nword.", True),  # spacing and case aside
        ("Hello!", False),  # an instruction-tuned model answers
        ("Hello! You asked me to say hello in one word.", False),
        ("", False),
    ],
)
def test_an_answer_that_repeats_the_question_is_told_apart(answer: str, repeats: bool) -> None:
    assert repeats_question("Say hello in one word.", answer) is repeats


@pytest.mark.engine
def test_a_base_model_recorded_for_chat_fails_the_verification_with_the_reason(sup: Supervisor) -> None:
    """Gemma's own template (no markers to echo): the base model writes the question back, noise to
    every chat client. The start fails with why and what to do, and nothing is left serving."""
    with pytest.raises(EngineVerifyError) as caught:
        sup.start(llama_spec(free_port(), purpose=CHAT), revision_label="r2", ready_timeout=120)

    reason = str(caught.value)
    assert "the test chat was answered with the question itself ('Say hello in one word." in reason
    assert "as a base model (not instruction-tuned) does, so every chat would get noise" in reason
    assert "instruction-tuned variant (-it, -Instruct, -Chat)" in reason
    assert "mark it as a completions model (base) in the model catalog" in reason
    assert not sup.status(probe=True).running


@pytest.mark.engine
def test_the_base_model_served_for_completions_passes_a_test_completion(sup: Supervisor) -> None:
    said: list[str] = []
    result = sup.start(
        llama_spec(free_port()), revision_label="r2", ready_timeout=120, on_progress=lambda *a: said.append(a[2])
    )

    assert result.chat is not None and result.chat.what == "test completion"
    assert (result.chat.completion_tokens or 0) >= 1 and result.chat.text
    assert "sending one short completion (a completions model)" in said
    assert not any(line.startswith("warning") for line in said)


@pytest.mark.engine
def test_the_shipped_gguf_serves_with_llamas_built_in_template_named_as_a_knob(sup: Supervisor) -> None:
    """The fix the warning names: `chat_template: gemma` (llama.cpp's built-in Gemma template),
    through the adapter's own command line, on the GGUF as shipped: no .jinja file to write."""
    from serving.engines.base import ModelRef
    from serving.launch import HostFacts, RevisionSpec, launch
    from tests.support.llama import llama_server_binary

    model = ModelRef(name="gemma-270m", gguf_file=gemma_package_path(), format="gguf", purpose=COMPLETIONS)
    knobs = {"chat_template": "gemma", "ctx_size": 2048, "parallel": 1, "n_gpu_layers": "0"}
    port = free_port()
    spec = RevisionSpec(engine="llama.cpp", version="", model=model, knobs=knobs, port=port)
    made = launch(spec, HostFacts(binary=llama_server_binary()))
    assert "--chat-template" in made.argv and made.argv[made.argv.index("--chat-template") + 1] == "gemma"

    result = sup.start(made, revision_label="r3", ready_timeout=120)
    assert result.chat is not None and result.chat.what == "test completion"  # the base model, as it is

    chat = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "Say hello in one word."}], "max_tokens": 16},
        timeout=60,
    ).json()["choices"][0]["message"]["content"]
    assert echoed_marker(chat) is None  # in Gemma's own turns: no marker printed back
    # The chat the model is sent is the user's question in Gemma's turns. With Jinja on (llama-server's
    # default) the name was read as the template's text: every prompt was the word 'gemma'.
    formatted = httpx.post(
        f"http://127.0.0.1:{port}/apply-template",
        json={"messages": [{"role": "user", "content": "Say hello in one word."}]},
        timeout=10,
    ).json()["prompt"]
    assert formatted == "<start_of_turn>user\nSay hello in one word.<end_of_turn>\n<start_of_turn>model\n"

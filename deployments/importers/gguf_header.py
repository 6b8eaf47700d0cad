"""GGUF header -> ModelArch + the facts llama.cpp's KV estimate needs (GgufKvFacts).

Keys are gguf-py's (`gguf/constants.py Keys`). Per-layer arrays are kept as such:
`{arch}.attention.head_count_kv` may be a list with 0 on recurrent layers. Which layers use the
sliding window: `{arch}.attention.sliding_window_pattern` when the file has it (a period or a
per-layer bool list), else llama.cpp's built-in period for the architecture (src/models/gemma3.cpp
`load_swa_pattern(ml, 6)`; llama-hparams.cpp set_swa_pattern: layer il is SWA when
il % n < n - 1).

Hostile files: the header is read here, not by gguf-py's GGUFReader (which decodes every array
element through numpy: ~30 s for a 262k vocabulary on a busy machine). `_scan` walks it with bounds
(key count, array lengths, string lengths, tensor count, every length within the file), so a header
declaring billions of entries is refused at once. Every key the importer reads must have the GGUF
type it expects, and every fact passes the bounds of serving.arch; anything else is a
GgufHeaderError naming the key. Little-endian files only (what every converter writes).
"""

from __future__ import annotations

import math
import mmap
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from serving.arch import (
    FULL_ATTENTION,
    INT_FACTS,
    LINEAR_ATTENTION,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_VOCAB,
    SLIDING_ATTENTION,
    ArchFactError,
    ModelArch,
    arch_from_facts,
    check_fact,
    check_int,
)
from serving.engines.base import gguf_split_part
from serving.planner.inputs import GgufKvFacts
from serving.purpose import GgufNaming, PurposeGuess, guess_purpose

# Header bounds. Real files: ~40-60 keys, ~1,100 tensors (DeepSeek-V3), arrays up to the vocabulary
# (262,144 tokens, ~500k merges), chat templates of tens of KB.
MAX_KV = 4_096
MAX_TENSORS = 65_536
MAX_ARRAY = MAX_VOCAB  # elements in one array
MAX_STRING = 4 * 1024 * 1024  # bytes in one string value
MAX_KEY = 1_024  # bytes in a key or tensor name
MAX_DIMS = 4  # GGML_MAX_DIMS
# GGUFValueType -> fixed size in bytes (8 = STRING and 9 = ARRAY are variable).
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY, _BOOL = 8, 9, 7
_INTEGER_TYPES = frozenset({0, 1, 2, 3, 4, 5, 10, 11})

# llama.cpp's default SWA period per architecture when the GGUF does not carry a pattern
# (src/models/<arch>.cpp load_hparams).
DEFAULT_SWA_PERIOD = {"gemma3": 6, "gemma2": 2, "cohere2": 4, "gemma3n": 5}
# Hybrids whose recurrent layers follow full_attention_interval (src/models/qwen3next.cpp, qwen35.cpp).
INTERVAL_HYBRIDS = {"qwen3next", "qwen35", "qwen35moe"}
# llama_ftype names (include/llama.h) for the common file types.
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    32: "BF16",
}


class GgufHeaderError(ValueError):
    """The file is not a GGUF model the importer understands."""


class GgufTruncated(GgufHeaderError):
    """The header runs past the end of the bytes read: for a whole file, a truncated file; for
    the first bytes of a remote file (read by HTTP ranges), a sign to read more."""


@dataclass(frozen=True)
class GgufImport:
    arch: ModelArch
    kv: GgufKvFacts
    file_type_name: str | None
    file_size: int
    name: str | None = None
    # tokenizer.chat_template is set: without it llama.cpp falls back to ChatML, which a model trained
    # on another format answers with gibberish that echoes the markers (`<|im_end|>`).
    has_chat_template: bool = False
    # The template formats tool definitions (it reads `tools`): the model was trained to call tools in
    # its own format. False for a template without them and for no template at all.
    chat_template_tools: bool = False
    # The naming fields (general.finetune, .name, .basename, .base_model.count): what the model is for.
    naming: GgufNaming = GgufNaming()

    def purpose(self, *names: tuple[str, str | None]) -> PurposeGuess:
        """Chat or completions, as the header's names tell, then `names` (the file's, a repository id)."""
        return guess_purpose(names, gguf=self.naming)


def _shard_paths(path: Path) -> list[Path]:
    split = gguf_split_part(path.name)
    if split is None:
        return [path]
    return [p for p in map(path.with_name, split.names()) if p.exists()]


def _per_layer(value: Any, n_layer: int) -> tuple[int, ...]:
    if isinstance(value, list):
        values = [int(v) for v in value]
        return tuple((values + values[-1:] * n_layer)[:n_layer]) if values else (0,) * n_layer
    return (int(value),) * n_layer


@dataclass(frozen=True)
class _Field:
    kind: int  # GGUFValueType
    item: int | None  # an array's value type
    value: Any  # scalar, bytes (string), list (short scalar array) or None (long array, unread)
    count: int = 1  # an array's length


@dataclass(frozen=True)
class _Header:
    fields: dict[str, _Field]
    tensor_elements: list[int]


def _scan(path: Path) -> _Header:
    """Read the header (key/values and tensor infos) with bounds, and nothing else.

    Raises GgufHeaderError for a count, length or type no real GGUF has, or one that runs past
    the end of the file. Time is linear in the header's size, and the header is bounded; long
    arrays (the vocabulary) are skipped, not decoded. gguf-py's reader is not used: it builds
    numpy views per array element (~30 s for a 262k vocabulary on a busy machine)."""
    try:
        with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _walk_header(data, path.name)
    except GgufHeaderError:
        raise
    except (OSError, ValueError) as exc:  # an empty file cannot be mapped
        raise GgufHeaderError(f"{path.name} is not a readable GGUF file: {exc}") from None


class _Cursor:
    """A bounded walk over a header's bytes: every read checks it stays inside them."""

    def __init__(self, data: mmap.mmap | bytes, name: str) -> None:
        self.data, self.name, self.size, self.offset = data, name, len(data), 0

    def take(self, fmt: str) -> Any:
        width = struct.calcsize(fmt)
        if self.offset + width > self.size:
            raise GgufTruncated(f"{self.name} ends inside its header (truncated)")
        value = struct.unpack_from(fmt, self.data, self.offset)[0]
        self.offset += width
        return value

    def skip(self, count: int, what: str) -> None:
        if count < 0:
            raise GgufHeaderError(f"{self.name}: {what} has a negative length")
        if self.offset + count > self.size:
            raise GgufTruncated(f"{self.name}: {what} runs past the end of the file")
        self.offset += count

    def string(self, most: int, what: str, keep: bool = False) -> bytes | None:
        length = self.take("<Q")
        if length > most:
            raise GgufHeaderError(f"{self.name}: {what} is {length:,} bytes long; at most {most:,}")
        start = self.offset
        self.skip(length, what)
        return bytes(self.data[start : start + length]) if keep else None

    def array(self, kind: int) -> _Field:
        """An array value: short scalar arrays kept, long ones and string arrays skipped."""
        name = self.name
        item, count = self.take("<I"), self.take("<Q")
        if count > MAX_ARRAY:
            raise GgufHeaderError(f"{name}: an array of {count:,} values; at most {MAX_ARRAY:,}")
        values: Any = None
        if item in _SCALAR_SIZES:
            start = self.offset
            self.skip(_SCALAR_SIZES[item] * count, "an array")
            if count <= MAX_LAYERS:
                values = list(struct.unpack_from(f"<{count}{_SCALAR_FORMATS[item]}", self.data, start))
        elif item == _STRING:
            if self.offset + 8 * count > self.size:
                raise GgufTruncated(f"{name}: an array runs past the end of the file")
            for _ in range(count):
                self.string(MAX_STRING, "a string in an array")
        else:
            raise GgufHeaderError(f"{name}: an array of value type {item}, which GGUF models do not use")
        return _Field(kind, item, values, count)

    def value(self) -> _Field:
        """One metadata value (its type, then the value)."""
        kind = self.take("<I")
        if kind in _SCALAR_SIZES:
            return _Field(kind, None, self.take("<" + _SCALAR_FORMATS[kind]))
        if kind == _STRING:
            return _Field(kind, None, self.string(MAX_STRING, "a string value", keep=True))
        if kind == _ARRAY:
            return self.array(kind)
        raise GgufHeaderError(f"{self.name}: unknown value type {kind}")

    def tensor_elements(self) -> int:
        """One tensor's description, skipped: how many elements it holds."""
        self.string(MAX_KEY, "a tensor name")
        dims = self.take("<I")
        if dims > MAX_DIMS:
            raise GgufHeaderError(f"{self.name}: a tensor with {dims} dimensions; at most {MAX_DIMS}")
        if self.offset + 8 * dims + 12 > self.size:
            raise GgufTruncated(f"{self.name}: a tensor's description runs past the end of the file")
        shape = struct.unpack_from(f"<{dims}Q", self.data, self.offset)
        self.skip(8 * dims + 4 + 8, "a tensor's description")
        return math.prod(shape)


def _walk_header(data: mmap.mmap | bytes, name: str) -> _Header:
    cursor = _Cursor(data, name)
    if data[:4] != b"GGUF":
        raise GgufHeaderError(f"{name} is not a GGUF file (no GGUF magic)")
    if cursor.size < 24:
        raise GgufTruncated(f"{name} is too short to be a GGUF file (truncated)")
    cursor.offset = 4
    version = cursor.take("<I")
    if version not in (2, 3):
        raise GgufHeaderError(f"{name} is GGUF version {version}; versions 2 and 3 (little-endian) are supported")
    tensors, kvs = cursor.take("<Q"), cursor.take("<Q")
    if kvs > MAX_KV:
        raise GgufHeaderError(f"{name} declares {kvs:,} metadata keys; at most {MAX_KV:,}")
    if tensors > MAX_TENSORS:
        raise GgufHeaderError(f"{name} declares {tensors:,} tensors; at most {MAX_TENSORS:,}")
    fields: dict[str, _Field] = {}
    for _ in range(kvs):
        raw_key = cursor.string(MAX_KEY, "a metadata key", keep=True) or b""
        key = raw_key.decode("utf-8", "replace")
        if key in fields:
            raise GgufHeaderError(f"{name}: the key {key[:80]!r} appears twice")
        fields[key] = cursor.value()
    return _Header(fields, [cursor.tensor_elements() for _ in range(tensors)])


def read_gguf_header(path: str | Path) -> GgufImport:
    """Read one GGUF file's header (tensor data is never read)."""
    path = Path(path)
    header = _scan(path)
    shards = _shard_paths(path)
    return _checked_read(header, path.name, sum(s.stat().st_size for s in shards), single=len(shards) == 1)


def read_gguf_header_bytes(data: bytes, *, name: str, file_size: int, shards: int = 1) -> GgufImport:
    """The same from the first bytes of a GGUF file (read by HTTP ranges: the tensor data is never
    fetched). `file_size`: the whole model's bytes (all shards). Raises GgufTruncated when `data`
    ends inside the header (read more), GgufHeaderError for a file the importer refuses."""
    if not data.startswith(b"GGUF") and len(data) >= 4:
        raise GgufHeaderError(f"{name} is not a GGUF file (no GGUF magic)")
    return _checked_read(_walk_header(data, name), name, file_size, single=shards == 1)


def _checked_read(header: _Header, name: str, file_size: int, *, single: bool) -> GgufImport:
    try:
        return _read(header, name, file_size, single=single)
    except GgufHeaderError:
        raise
    except ArchFactError as exc:
        raise GgufHeaderError(f"{name}: {exc}") from None
    except (ValueError, ArithmeticError, IndexError, KeyError) as exc:
        raise GgufHeaderError(f"{name} has a header the importer cannot read: {exc}") from None


class _Keys:
    """The header's keys as the importer reads them: each of the GGUF type it expects, each fact
    within serving.arch's bounds (GgufHeaderError naming the key otherwise). `p` is the
    architecture's key prefix ("llama.")."""

    def __init__(self, header: _Header, name: str) -> None:
        self.header, self.name, self.p = header, name, ""

    def typed(self, key: str, want: str) -> Any:
        """The value of `key` if its GGUF type is what the importer reads there, else an error.

        want: "int", "str", "int|ints" (an integer or a per-layer array of them), "int|bools",
        "len" (an array's length, its values unread)."""
        name = self.name
        item = self.header.fields.get(key)
        if item is None:
            return None
        if item.kind == _ARRAY and want == "len":
            return item.count
        if item.kind == _ARRAY:
            if item.count > MAX_LAYERS:
                raise GgufHeaderError(f"{name}: {key} lists {item.count:,} values; at most {MAX_LAYERS:,}")
            if want == "int|ints" and item.item in _INTEGER_TYPES:
                return [int(v) for v in item.value]
            if want == "int|bools" and item.item == _BOOL:
                return [bool(v) for v in item.value]
        elif want == "str" and item.kind == _STRING:
            try:
                value = item.value.decode("utf-8")
            except UnicodeDecodeError:
                raise GgufHeaderError(f"{name}: {key} is not UTF-8 text") from None
            if len(value) > 1_000 or "\x00" in value:
                raise GgufHeaderError(f"{name}: {key} is not a plausible name")
            return value
        elif want in ("int", "int|ints", "int|bools") and item.kind in _INTEGER_TYPES:
            return int(item.value)
        expected = {"int": "an integer", "str": "a string", "len": "an array"}.get(want, "an integer or an array")
        raise GgufHeaderError(f"{name}: {key} must be {expected}")

    def hint(self, key: str, want: str) -> Any:
        """`typed`, for a key that only feeds a guess (the naming fields of serving.purpose): a value
        of the wrong type or an implausible one reads as absent instead of refusing the import."""
        try:
            return self.typed(key, want)
        except GgufHeaderError:
            return None

    def field(self, key: str, fact: str | None = None) -> Any:
        """An integer key; with `fact`, also within that ModelArch fact's bounds (error names the key)."""
        value = self.typed(key, "int")
        if fact is None or value is None:
            return value
        if value == 0 and INT_FACTS[fact][0] > 0:
            return None  # 0 where a fact cannot be 0: the converter's "not set"
        return check_fact(fact, value, label=key)


@dataclass(frozen=True)
class _Layers:
    """What each layer is: its KV heads (0 on recurrent ones), recurrent or not, sliding or not."""

    n_embd: Any
    n_head: int
    kv_heads: tuple[int, ...]
    key_length: int
    value_length: int
    recurrent: list[bool]
    n_swa: Any
    swa: list[bool]

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(
            LINEAR_ATTENTION if r else SLIDING_ATTENTION if s else FULL_ATTENTION
            for r, s in zip(self.recurrent, self.swa, strict=True)
        )


def _architecture(keys: _Keys) -> str:
    name = keys.name
    arch_name = keys.typed("general.architecture", "str")
    if not arch_name:
        raise GgufHeaderError(f"{name} has no general.architecture")
    if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,64}", arch_name):
        raise GgufHeaderError(f"{name}: general.architecture {arch_name[:40]!r} is not an architecture name")
    return str(arch_name)


def _layer_count(keys: _Keys) -> int:
    p = keys.p
    n_layer = keys.field(p + "block_count")
    if not n_layer:
        raise GgufHeaderError(f"{keys.name} has no {p}block_count")
    return check_int(n_layer, least=1, most=MAX_LAYERS, label=p + "block_count")  # before any per-layer list


def _swa_layers(keys: _Keys, arch_name: str, n_layer: int, n_swa: Any) -> list[bool]:
    """Which layers use the sliding window: the file's pattern, else llama.cpp's period."""
    p = keys.p
    swa = [False] * n_layer
    if n_swa:
        pattern = keys.typed(p + "attention.sliding_window_pattern", "int|bools")
        if isinstance(pattern, list):
            swa = ([bool(v) for v in pattern] + [False] * n_layer)[:n_layer]
        else:
            label = p + "attention.sliding_window_pattern"
            period = check_int(pattern, least=0, most=MAX_LAYERS, label=label) if pattern else 0
            period = period or DEFAULT_SWA_PERIOD.get(arch_name, 0)
            swa = [period == 0 or (i % period < period - 1) for i in range(n_layer)] if period else swa
    return swa


def _layers(keys: _Keys, arch_name: str, n_layer: int) -> _Layers:
    p = keys.p
    n_embd = keys.field(p + "embedding_length", "hidden_size")
    heads_raw = keys.typed(p + "attention.head_count", "int|ints")
    heads = _per_layer(heads_raw, n_layer) if heads_raw is not None else (0,) * n_layer
    kv_raw = keys.typed(p + "attention.head_count_kv", "int|ints")
    kv_heads = _per_layer(kv_raw, n_layer) if kv_raw is not None else heads
    for label, values in ((p + "attention.head_count", heads), (p + "attention.head_count_kv", kv_heads)):
        for value in values:
            check_int(value, least=0, most=MAX_HEADS, label=label)
    n_head = max(heads) if heads else 0
    # llama-model.cpp: key/value length default to n_embd / n_head
    default_key_length = (n_embd // n_head) if n_embd and n_head else 0
    key_length = keys.field(p + "attention.key_length", "head_dim") or default_key_length
    value_length = keys.field(p + "attention.value_length", "v_head_dim") or key_length

    recurrent = [False] * n_layer
    interval = keys.field(p + "full_attention_interval")
    if arch_name in INTERVAL_HYBRIDS and interval:
        interval = check_int(interval, least=1, most=MAX_LAYERS, label=p + "full_attention_interval")
        recurrent = [(i + 1) % interval != 0 for i in range(n_layer)]
    elif isinstance(kv_raw, list) and keys.field(p + "ssm.conv_kernel", "linear_conv_kernel_dim"):
        recurrent = [h == 0 for h in kv_heads]
    kv_heads = tuple(0 if r else h for h, r in zip(kv_heads, recurrent, strict=True))
    n_swa = keys.field(p + "attention.sliding_window", "sliding_window")
    swa = _swa_layers(keys, arch_name, n_layer, n_swa)
    return _Layers(n_embd, n_head, kv_heads, key_length, value_length, recurrent, n_swa, swa)


def _kv_facts(
    keys: _Keys, arch_name: str, n_layer: int, layers: _Layers, *, file_type: Any, file_size: int
) -> GgufKvFacts:
    p, field = keys.p, keys.field
    return GgufKvFacts.checked(
        {
            "architecture": arch_name,
            "n_layer": n_layer,
            "head_count_kv": list(layers.kv_heads),
            "key_length": layers.key_length,
            "value_length": layers.value_length,
            "swa_layers": layers.swa if any(layers.swa) else [],
            "sliding_window": layers.n_swa or None,
            "context_length": field(p + "context_length", "native_context"),
            "file_type": file_type,
            "file_size": file_size,
            "ssm_conv_kernel": field(p + "ssm.conv_kernel", "linear_conv_kernel_dim"),
            "ssm_inner_size": field(p + "ssm.inner_size"),
            "ssm_state_size": field(p + "ssm.state_size"),
            "ssm_group_count": field(p + "ssm.group_count"),
            "recurrent_layers": layers.recurrent if any(layers.recurrent) else [],
        }
    )


def _arch(keys: _Keys, arch_name: str, n_layer: int, layers: _Layers, params: int | None) -> ModelArch:
    p, field, typed = keys.p, keys.field, keys.typed
    kinds = layers.kinds
    vocab = field(p + "vocab_size", "vocab_size") or typed("tokenizer.ggml.tokens", "len") or None
    time_step_rank, inner = field(p + "ssm.time_step_rank"), field(p + "ssm.inner_size")
    linear = any(layers.recurrent) and arch_name in INTERVAL_HYBRIDS
    nonzero_kv = [h for h in layers.kv_heads if h]
    feed_forward = typed(p + "feed_forward_length", "int|ints")
    key_length, value_length = layers.key_length, layers.value_length
    return arch_from_facts(
        {
            "architecture": arch_name,
            "family": keys.hint("general.basename", "str") or typed("general.name", "str"),
            "params_total": params or None,
            "num_layers": n_layer,
            "full_attention_layers": kinds.count(FULL_ATTENTION),
            "linear_attention_layers": kinds.count(LINEAR_ATTENTION),
            "sliding_window_layers": kinds.count(SLIDING_ATTENTION),
            "sliding_window": layers.n_swa if layers.n_swa and any(layers.swa) else None,
            "hidden_size": layers.n_embd,
            "intermediate_size": _scalar(feed_forward),
            "moe_intermediate_size": field(p + "expert_feed_forward_length", "moe_intermediate_size"),
            "num_attention_heads": layers.n_head or None,
            "num_kv_heads": max(nonzero_kv) if nonzero_kv else None,
            "head_dim": key_length or None,
            "v_head_dim": value_length if value_length != key_length else None,
            "vocab_size": vocab,
            "num_experts": field(p + "expert_count", "num_experts"),
            "experts_per_token": field(p + "expert_used_count", "experts_per_token"),
            "native_context": field(p + "context_length", "native_context"),
            # Qwen3-Next/3.5 -> GGUF (llama.cpp's conversion/qwen.py): group_count = linear key heads, time_step_rank =
            # linear value heads, state_size = key head dim, inner_size = v_dim x v_heads.
            "linear_num_key_heads": field(p + "ssm.group_count") if linear else None,
            "linear_num_value_heads": time_step_rank if linear else None,
            "linear_key_head_dim": field(p + "ssm.state_size") if linear else None,
            "linear_value_head_dim": (inner // time_step_rank) if linear and inner and time_step_rank else None,
            "linear_conv_kernel_dim": field(p + "ssm.conv_kernel", "linear_conv_kernel_dim") if linear else None,
            "layer_types": list(kinds),
        }
    )


def _read(header: _Header, name: str, file_size: int, *, single: bool) -> GgufImport:
    keys = _Keys(header, name)
    arch_name = _architecture(keys)
    keys.p = f"{arch_name}."
    n_layer = _layer_count(keys)
    layers = _layers(keys, arch_name, n_layer)
    file_type = keys.field("general.file_type")
    if file_type is not None:
        file_type = check_int(file_type, least=0, most=1_023, label="general.file_type")
    facts = _kv_facts(keys, arch_name, n_layer, layers, file_type=file_type, file_size=file_size)
    arch = _arch(keys, arch_name, n_layer, layers, sum(header.tensor_elements) if single else None)
    template = header.fields.get("tokenizer.chat_template")
    template_text = (template.value or b"") if template and template.kind == _STRING else b""
    return GgufImport(
        arch=arch,
        kv=facts,
        file_type_name=FILE_TYPES.get(file_type) if file_type is not None else None,
        file_size=file_size,
        name=keys.typed("general.name", "str") or None,
        has_chat_template=bool(template_text.strip()),
        # A template that formats tool definitions reads `tools`; DeepSeek-style ones read `tool_calls`.
        chat_template_tools=b"tools" in template_text or b"tool_call" in template_text,
        naming=GgufNaming(
            finetune=keys.hint("general.finetune", "str") or None,
            name=keys.typed("general.name", "str") or None,
            basename=keys.hint("general.basename", "str") or None,
            derived=(keys.hint("general.base_model.count", "int") or 0) > 0,
            has_template=bool(template_text.strip()),
        ),
    )


def _scalar(value: Any) -> Any:
    if isinstance(value, list):
        return max(value) if value else None
    return value

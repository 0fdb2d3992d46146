"""A small model checkpoint laid out like DeepSeek-V4-Flash-0731 on a real GB10.

Same file names, config keys, index format and revision marker as the real 160 GB
checkpoint, with shards of a few KB that are valid safetensors files.
"""
from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

MODEL_ID = "deepseek-ai/DeepSeek-V4-Flash-0731"
MODEL_DIRNAME = "DeepSeek-V4-Flash-0731"
MODEL_REVISION = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
REVISION_MARKER = ".r0b0tlab-model-revision"
SHARDS = 48
TENSORS_PER_SHARD = 4

CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "expert_dtype": "fp4",
    "max_position_embeddings": 1048576,
    "n_routed_experts": 256,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 43,
    "num_nextn_predict_layers": 1,
    "torch_dtype": "bfloat16",
}


def shard_name(i: int) -> str:
    return f"model-{i:05d}-of-{SHARDS:05d}.safetensors"


def _shard_bytes(index: int) -> tuple[bytes, dict[str, int]]:
    """One valid safetensors file: u64 header length, JSON header, raw tensor data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    data = b""
    names = {}
    for t in range(TENSORS_PER_SHARD):
        layer = (index - 1) * TENSORS_PER_SHARD + t
        name = f"model.layers.{layer % 43}.mlp.experts.{layer}.w{t % 3 + 1}.weight"
        payload = hashlib.sha256(f"{MODEL_REVISION}:{name}".encode()).digest() * 16  # 512 bytes
        header[name] = {"dtype": "U8", "shape": [len(payload)], "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
        names[name] = len(payload)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + data, names


def total_size() -> int:
    """``metadata.total_size`` of the index: the bytes of every tensor in every shard."""
    return sum(sum(_shard_bytes(i)[1].values()) for i in range(1, SHARDS + 1))


def write(dest: Path, revision: str = MODEL_REVISION) -> Path:
    """Write the checkpoint into ``dest/DeepSeek-V4-Flash-0731`` and return that folder."""
    root = dest / MODEL_DIRNAME
    root.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    total = 0
    for i in range(1, SHARDS + 1):
        blob, names = _shard_bytes(i)
        (root / shard_name(i)).write_bytes(blob)
        for name, size in names.items():
            weight_map[name] = shard_name(i)
            total += size
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (root / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    (root / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    (root / REVISION_MARKER).write_text(revision + "\n")
    return root

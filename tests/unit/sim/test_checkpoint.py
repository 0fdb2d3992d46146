import json
import struct

from dspark_sim import checkpoint


def test_checkpoint_is_laid_out_like_the_real_one(tmp_path):
    root = checkpoint.write(tmp_path)
    assert root.name == "DeepSeek-V4-Flash-0731"
    assert (root / ".r0b0tlab-model-revision").read_text().strip() == checkpoint.MODEL_REVISION
    cfg = json.loads((root / "config.json").read_text())
    assert cfg["architectures"] == ["DeepseekV4ForCausalLM"] and cfg["num_hidden_layers"] == 43
    index = json.loads((root / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert shards == [f"model-{i:05d}-of-00048.safetensors" for i in range(1, 49)]
    total = 0
    for shard in shards:
        blob = (root / shard).read_bytes()
        (n,) = struct.unpack("<Q", blob[:8])
        header = json.loads(blob[8:8 + n])
        for name, t in header.items():
            if name == "__metadata__":
                continue
            start, end = t["data_offsets"]
            assert index["weight_map"][name] == shard
            assert 8 + n + end <= len(blob)
            total += end - start
    assert index["metadata"]["total_size"] == total


def test_checkpoint_is_deterministic(tmp_path):
    a = checkpoint.write(tmp_path / "a")
    b = checkpoint.write(tmp_path / "b")
    for f in a.iterdir():
        assert f.read_bytes() == (b / f.name).read_bytes()

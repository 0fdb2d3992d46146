# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Options of a model checkpoint check (``_model_checkpoint.CHECKPOINT_OPTIONS``): gb10.dspark.model_checkpoint and
gb10.dspark.rank_preflight take them."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  path:
    description: The checkpoint directory on the rank, for example C(/models/DeepSeek-V4-Flash-0731).
    type: path
    required: true
  expected_revision:
    description:
      - The pinned model revision, a 40-hex git sha such as C(9e165c30e2704aec5d9d593cce3eebd58bbef1cb).
      - Compared without regard to case with the stripped content of I(revision_marker).
    type: str
    required: true
  revision_marker:
    description:
      - The file inside I(path) that holds the revision the checkpoint was downloaded at; the operator
        writes it after the download. A path relative to I(path) that cannot leave it.
    type: str
    default: .r0b0tlab-model-revision
  expected_config:
    description:
      - Keys that C(config.json) must hold, each with an equal value (JSON semantics; lists compare as
        lists in order, a boolean never equals a number, C(43) equals C(43.0)).
      - Keys not listed are not compared.
    type: dict
    default: {}
  expected_shard_count:
    description: How many shards the checkpoint has; fixes the pinned shard file names.
    type: int
    default: 48
  index_file:
    description: The safetensors index inside I(path), relative to it.
    type: str
    default: model.safetensors.index.json
  expected_total_size:
    description: When set, C(metadata.total_size) of the index must equal it (tensor bytes, without headers).
    type: int
  deep:
    description:
      - Also hash every shard with sha256. Reads the whole checkpoint (160 GB for DeepSeek-V4-Flash).
    type: bool
    default: false
  expected_shard_sha256:
    description:
      - Shard file name to its pinned sha256 (64 hex digits), for every pinned shard and no other.
      - Compared only when I(deep=true); otherwise the module warns that no hash was checked.
      - In deep mode without it, the hashes are only returned.
    type: dict
  progress_path:
    description:
      - In deep mode, a JSON file on the rank that the module keeps up to date while hashing, so a role
        running it async can show progress. Written atomically (temporary file and rename) at the
        start, at most every 2 seconds within a shard, and after each shard.
      - "It holds C(shard) (the shard being hashed), C(done_bytes) and C(total_bytes) (over all
        shards), C(shards_done), C(shards_total) and C(updated) (epoch seconds)."
      - Its directory must exist. Ignored unless I(deep=true).
    type: path
"""

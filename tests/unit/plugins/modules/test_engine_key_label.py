# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gb10.dspark.engine_key_label: the API-key label keyed with the rank's own secret, made once."""
from __future__ import annotations

import hashlib
import json
import os
import stat

from ansible_collections.gb10.dspark.plugins.modules import engine_key_label

KEY = "sk-label-4e1f0a"


def test_check_mode_makes_nothing_and_says_the_engine_would_change(tmp_path, run_module):
    secret = tmp_path / "dspark" / "engine-label.key"
    result = run_module(engine_key_label, {"api_key": KEY, "secret_file": str(secret)}, check_mode=True)
    assert result["failed"] is False and result["changed"] is True
    assert result["label"] == "hmac-sha256:pending" and result["secret_created"] is False
    assert not secret.exists() and not secret.parent.exists()


def test_the_secret_is_made_once_and_the_label_is_stable(tmp_path, run_module):
    secret = tmp_path / "dspark" / "engine-label.key"
    first = run_module(engine_key_label, {"api_key": KEY, "secret_file": str(secret)})
    assert first["changed"] is True and first["secret_created"] is True
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    label = first["label"]
    assert label.startswith("hmac-sha256:") and len(label) == len("hmac-sha256:") + 32
    assert hashlib.sha256(KEY.encode()).hexdigest()[:16] not in label
    text = json.dumps(first)
    assert KEY not in text and secret.read_text().strip() not in text  # neither the key nor the secret
    again = run_module(engine_key_label, {"api_key": KEY, "secret_file": str(secret)})
    assert again["changed"] is False and again["label"] == label
    in_check = run_module(engine_key_label, {"api_key": KEY, "secret_file": str(secret)}, check_mode=True)
    assert in_check["changed"] is False and in_check["label"] == label
    rotated = run_module(engine_key_label, {"api_key": KEY + "-2", "secret_file": str(secret)})
    assert rotated["changed"] is False and rotated["label"] != label
    other_rank = run_module(engine_key_label, {"api_key": KEY, "secret_file": str(tmp_path / "other.key")})
    assert other_rank["label"] != label


def test_without_a_key_no_secret_is_read_or_made(tmp_path, run_module):
    secret = tmp_path / "engine-label.key"
    for args in ({"secret_file": str(secret)}, {"api_key": "", "secret_file": str(secret)}):
        result = run_module(engine_key_label, args)
        assert result == {"changed": False, "failed": False, "label": "none", "secret_created": False}
    assert not secret.exists()


def test_a_secret_others_can_read_is_refused_naming_path_and_modes(tmp_path, run_module):
    secret = tmp_path / "engine-label.key"
    secret.write_text("cd" * 32 + "\n")
    os.chmod(secret, 0o640)
    result = run_module(engine_key_label, {"api_key": KEY, "secret_file": str(secret)})
    assert result["failed"] is True
    assert str(secret) in result["msg"] and "expected mode 0600" in result["msg"] and "found 0640" in result["msg"]
    assert "cd" * 32 not in result["msg"] and KEY not in result["msg"] and "label" not in result

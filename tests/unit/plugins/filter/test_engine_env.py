"""The engine_env filters: the secret-named entries the roles add back from the inventory, and the env file text."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gb10.dspark.plugins.filter.engine_env import FilterModule

FILTERS = FilterModule().filters()


def test_secret_env_keeps_only_secret_named_entries_as_text():
    env = {"MYSITE_TOKEN": "tok_1", "DB_PASSWD": 1234, "DSPARK_SIM_STARTUP_DELAY_S": "4", "MTP_NUM_TOKENS": "2",
           "HF_TOKEN": None}
    assert FILTERS["secret_env"](env) == {"MYSITE_TOKEN": "tok_1", "DB_PASSWD": "1234"}
    assert FILTERS["secret_env"](None) == {} and FILTERS["secret_env"]({}) == {}
    with pytest.raises(AnsibleFilterError, match="must be a mapping"):
        FILTERS["secret_env"](["MYSITE_TOKEN=x"])


def test_env_file_is_sorted_lines_and_names_a_bad_value_without_showing_it():
    assert FILTERS["env_file"]({"B": "2", "A": ""}) == "A=\nB=2\n"
    with pytest.raises(AnsibleFilterError) as err:
        FILTERS["env_file"]({"MYSITE_TOKEN": "tok_0123456789\n"})
    assert "MYSITE_TOKEN" in str(err.value) and "tok_0123456789" not in str(err.value)


def test_the_profile_copy_expression_puts_the_real_value_back():
    """roles/profile: resolved env (placeholders) | combine(extra | secret_env) | env_file."""
    resolved = {"MYSITE_TOKEN": "<redacted>", "VLLM_X": "1"}
    text = FILTERS["env_file"]({**resolved, **FILTERS["secret_env"]({"MYSITE_TOKEN": "tok_1", "DSPARK_SIM_A": "2"})})
    assert text == "MYSITE_TOKEN=tok_1\nVLLM_X=1\n"

# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which variable names hold secrets: the one rule of the collection (the evidence pack redacts by
it, the fleet audit neither returns nor hashes what it matches).

A NAME is judged by its words (split at ``_``, ``-``, ``.`` and camelCase), so counters and
structural names that merely contain a word - MTP_NUM_TOKENS, DSPARK_SIM_TOKEN_DELAY_S, run_key,
pass_count, KV_CACHE_DTYPE - are not secret, while DB_PASSWD, AWS_CREDENTIALS, HF_TOKEN, apiKey
and VLLM_API_KEY are.
"""
from __future__ import annotations

import re

SECRET_IN_NAME = ("SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "APIKEY", "ACCESSKEY", "PRIVATEKEY",
                  "COOKIE", "BEARER", "SESSIONID")  # anywhere, words glued together
SECRET_WORDS = frozenset(("AUTH", "AUTHORIZATION", "OAUTH", "CRED", "CREDS", "PRIVATE", "SIGNATURE", "CERT", "CERTS",
                          "CERTIFICATE", "JWT", "SALT", "DSN"))  # any word
SECRET_LAST_WORDS = frozenset(("TOKEN", "PASS", "PWD", "SESSION"))  # the last word (or a last word ending in TOKEN)
KEY_WORDS = frozenset(("KEY", "KEYS"))  # the last word after a qualifier: API_KEY, not key or run_key
NOT_SECRET_KEY_QUALIFIERS = frozenset(("RUN", "SORT", "CACHE", "PARTITION", "PRIMARY", "FOREIGN", "ROUTING", "SHARD",
                                       "LOOKUP", "GROUP", "INDEX", "MAP", "DICT"))
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]+")


def is_secret_name(name: object) -> bool:
    """Whether a variable called ``name`` holds (or may hold) a secret, whatever its case."""
    if not isinstance(name, str):
        return False
    words = [w.upper() for w in _NOT_ALNUM.split(_CAMEL.sub("_", name)) if w]
    if not words:
        return False
    if any(part in "".join(words) for part in SECRET_IN_NAME) or any(w in SECRET_WORDS for w in words):
        return True
    last = words[-1]
    if last in KEY_WORDS:
        return len(words) > 1 and words[-2] not in NOT_SECRET_KEY_QUALIFIERS
    return last in SECRET_LAST_WORDS or last.endswith("TOKEN")

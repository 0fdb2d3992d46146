# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A URL split from its credentials, as a Jinja filter (the logic is in module_utils/common/_http.py)."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gb10.dspark.plugins.module_utils.common import _http


def url_credentials(url):
    """``url | gb10.dspark.url_credentials``: ``{url, username, password}``, the URL without its
    user and password (to show and to fetch), and those apart (``""`` when absent)."""
    if not isinstance(url, str):
        raise AnsibleFilterError(f"url_credentials: the URL must be a string, not {type(url).__name__}")
    clean, username, password = _http.url_credentials(url)
    return {"url": clean, "username": username or "", "password": password or ""}


class FilterModule:
    def filters(self):
        return {"url_credentials": url_credentials}

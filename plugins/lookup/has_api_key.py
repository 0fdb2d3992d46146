# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the site has an API key, as a lookup (the one definition is _site.has_api_key)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
name: has_api_key
author:
  - gb10.dspark contributors (!UNKNOWN)
version_added: 0.1.0
short_description: Whether the site has an API key (C(dspark_api_key) defined and not empty)
description:
  - Returns C(true) when the task's variables define C(dspark_api_key) (templated, so a variable that holds a
    template or a vaulted value counts as what it renders to) and it is not empty, else C(false).
  - The collection's one definition of "has an API key"; every role asks it instead of testing the variable
    itself. It returns only the boolean, never the key.
  - Takes no terms.
options: {}
seealso:
  - plugin: gb10.dspark.site
    plugin_type: lookup
"""

EXAMPLES = r"""
- name: Send the key only when the site has one
  gb10.dspark.engine_probe:
    api_key: "{{ dspark_api_key if lookup('gb10.dspark.has_api_key') else omit }}"
"""

RETURN = r"""
_raw:
  description: One boolean.
  type: list
  elements: bool
"""

from ansible.plugins.lookup import LookupBase

from ansible_collections.gb10.dspark.plugins.module_utils.common import _site


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        return [_site.has_api_key(variables, self._templar.template)]

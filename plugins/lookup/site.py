# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The site's defaults as a lookup (the table and the logic are in module_utils/common/_site.py)."""
from __future__ import annotations

DOCUMENTATION = r"""
---
name: site
author:
  - gb10.dspark contributors (!UNKNOWN)
version_added: 0.1.0
short_description: A site setting of the pairs, or the collection's one default for it
description:
  - Returns, for each term, the value of the site variable C(dspark_<term>) when the task's variables
    define it (templated, so a variable that holds a template gives what it renders to), else the
    collection's default for it, from the collection's one table of site defaults (the C(_site)
    module_utils).
  - "The terms and their defaults: C(container_name) (variable C(dspark_container_name), default
    C(dspark_vllm)), C(api_port) (C(dspark_api_port), C(8888)), C(master_port) (C(dspark_master_port),
    C(25000)), C(served_model_name) (C(dspark_served_model_name), C(deepseek-v4-flash-dspark)) and C(profile)
    (C(dspark_profile), the serving profile a pair runs, C(production))."
  - Roles use it wherever they need one of these settings, so that no role spells a default of its own.
  - A variable that is defined wins whatever its value, even null or empty; only an undefined one gives the default.
  - An unknown term is an error that lists the known terms.
options:
  _terms:
    description: The settings to look up, C(container_name), C(api_port), C(master_port), C(served_model_name)
      or C(profile).
    type: list
    elements: str
    required: true
seealso:
  - module: gb10.dspark.engine_probe
notes:
  - A site sets these variables once, in C(group_vars/all/site.yml) (see the collection's operator guide).
  - The same defaults are those of the collection's modules, for example the C(container) and C(base_url)
    options of M(gb10.dspark.engine_probe).
"""

EXAMPLES = r"""
- name: Read the head's own API
  gb10.dspark.engine_probe:
    container: "{{ lookup('gb10.dspark.site', 'container_name') }}"
    base_url: "http://127.0.0.1:{{ lookup('gb10.dspark.site', 'api_port') }}"
    model: "{{ lookup('gb10.dspark.site', 'served_model_name') }}"
  register: engine_state

- name: Several settings at once, as a list
  ansible.builtin.debug:
    msg: "{{ query('gb10.dspark.site', 'api_port', 'master_port') }}"
"""

RETURN = r"""
_raw:
  description:
    - One value per term, the variable's value or the site's default (a string for C(container_name),
      C(served_model_name) and C(profile), an integer for the ports unless the variable holds a string).
  type: list
  elements: raw
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.gb10.dspark.plugins.module_utils.common import _site


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        try:
            return [_site.site_value(term, variables, self._templar.template) for term in terms]
        except ValueError as exc:
            raise AnsibleLookupError(f"gb10.dspark.site: {exc}") from exc

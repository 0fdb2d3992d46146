# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The play's variable files read strictly (no key given twice): runs on the control node only.

The discovery and the verdict are in module_utils/common/_vars_sources.py; this plugin hands them the
play's inventory sources, hosts and groups, the command line's ``-e`` items and Ansible's loader
(which finds vars files exactly as ``host_group_vars`` does and decrypts a vaulted file)."""
from __future__ import annotations

import os

from ansible import context
from ansible.plugins.action import ActionBase

from ansible_collections.gb10.dspark.plugins.module_utils.common import _vars_sources


def _entities(task_vars: dict) -> list[str]:
    hostvars = task_vars.get("hostvars") or {}
    names = ["all"]
    for host in task_vars.get("ansible_play_hosts_all") or [task_vars.get("inventory_hostname")]:
        if host is None:
            continue
        names.extend(hostvars.get(host, {}).get("group_names") or [])
        names.append(host)
    return list(dict.fromkeys(names))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("files",))

    def _read(self, path: str) -> str:
        return str(self._loader.get_text_file_contents(path))  # a plain str, vault decrypted

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        files = self._task.args.get("files") or []
        if isinstance(files, str) or not all(isinstance(f, str) for f in files):
            result.update(failed=True, changed=False, msg="files must be a list of paths")
            return result
        found = _vars_sources.sources(
            inventory_sources=task_vars.get("ansible_inventory_sources") or [],
            playbook_dir=task_vars.get("playbook_dir"),
            entities=_entities(task_vars),
            extra=(context.CLIARGS or {}).get("extra_vars") or (),
            cwd=os.getcwd(),
            find=self._loader.find_vars_files,
            files=[os.path.expanduser(f) for f in files],
        )
        problems = _vars_sources.check(found, self._read)
        result["changed"] = False
        result["sources"] = [s.name for s in found]
        result["mismatches"] = [p.as_dict() for p in problems]
        result["msg"] = _vars_sources.summary(problems, len(found))
        if problems:
            result["failed"] = True
        return result

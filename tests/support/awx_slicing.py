"""The inventory a sliced AWX/AAP job hands each of its slices, made here by AWX's rule, for the tests
of the refusal of half pairs (docs/fleet-scale.md, "Job slicing").

AWX's rule (awx/main/models/inventory.py, ``Inventory.get_script_data`` and ``get_sliced_hosts``; the
effective count is ``JobTemplate.get_effective_slice_ct``):
- the job template's ``job_slice_count`` N is cut to the inventory's host count when it has fewer hosts;
- the inventory's enabled hosts are sorted by name, and slice k (1 to N) takes the hosts at positions
  k-1, k-1+N, k-1+2N, ...;
- the slice's inventory keeps every group with its variables and children, each group holding only
  that slice's hosts, and the variables of that slice's hosts only.
Names are sorted here as Python sorts strings (code points); AWX sorts in its database, whose
collation may order punctuation otherwise. The tests' names sort alike in both.
"""
from __future__ import annotations

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager


def effective_count(host_count: int, slice_count: int) -> int:
    return max(1, min(slice_count, host_count))


def slice_hosts(names, number: int, count: int) -> list[str]:
    """The hosts of slice ``number`` (1-based) of ``count``, by AWX's rule."""
    ordered = sorted(names)
    count = effective_count(len(ordered), count)
    if not 1 <= number <= count:
        raise ValueError(f"slice {number} of {count}: AWX makes slices 1 to {count} only")
    return ordered[number - 1::count] if count > 1 else ordered


def script_data(inventory: InventoryManager) -> dict:
    """The inventory as AWX stores it after a sync: groups (hosts, children, vars) and each host's own vars."""
    groups = {}
    for name, group in inventory.groups.items():
        if name in ("all", "ungrouped"):
            continue
        groups[name] = {"hosts": [h.name for h in group.hosts], "children": [c.name for c in group.child_groups],
                        "vars": dict(group.vars)}
    hostvars = {h.name: dict(h.vars) for h in inventory.get_hosts(ignore_restrictions=True)}
    for data in hostvars.values():
        data.pop("inventory_file", None)
        data.pop("inventory_dir", None)
    return {"groups": groups, "hostvars": hostvars, "vars": dict(inventory.groups["all"].vars)}


def sliced(data: dict, number: int, count: int) -> dict:
    """``data`` (:func:`script_data`) as slice ``number`` of ``count`` sees it."""
    keep = set(slice_hosts(data["hostvars"], number, count))
    return {"groups": {g: dict(v, hosts=[h for h in v["hosts"] if h in keep]) for g, v in data["groups"].items()},
            "hostvars": {h: v for h, v in data["hostvars"].items() if h in keep}, "vars": data["vars"]}


def load(data: dict) -> tuple[InventoryManager, HostVars]:
    """An Ansible inventory holding exactly ``data`` (as ansible-playbook would load AWX's inventory), and its hostvars."""
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[])
    for name in data["groups"]:
        inventory.add_group(name)
    for name, values in data["groups"].items():
        for child in values["children"]:
            inventory._inventory.add_child(name, child)
        for key, value in values["vars"].items():
            inventory.groups[name].set_variable(key, value)
    for host, values in data["hostvars"].items():
        inventory.add_host(host)
        for key, value in values.items():
            inventory.get_host(host).set_variable(key, value)
    for name, values in data["groups"].items():
        for host in values["hosts"]:
            inventory.add_host(host, group=name)
    for key, value in data["vars"].items():
        inventory.groups["all"].set_variable(key, value)
    inventory._inventory.reconcile_inventory()
    manager = VariableManager(loader=loader, inventory=inventory)
    return inventory, HostVars(inventory=inventory, variable_manager=manager, loader=loader)


def from_sources(*sources: str) -> dict:
    """:func:`script_data` of the inventory that ``-i source ...`` loads."""
    return script_data(InventoryManager(loader=DataLoader(), sources=list(sources)))

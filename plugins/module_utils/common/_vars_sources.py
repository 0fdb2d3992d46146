# Copyright (c) gb10.dspark contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files a play's variables come from, read strictly on the control node (the ``vars_sources`` action).

Ansible hands a play its variables already parsed: a key given twice in a vars file (``image_id:``
twice in the pin) has lost its first value before any task sees it, with at most a warning that
``ansible.cfg`` can switch off (``DUPLICATE_YAML_DICT_KEY``). The identity pin and the site file
are such vars files, so the check reads the sources again, with the collection's strict reader
(:mod:`._strict_yaml`):

* the ``group_vars/`` and ``host_vars/`` files that Ansible's ``host_group_vars`` plugin reads for
  the play's hosts: next to each inventory source and next to the playbook, for ``all``, every
  group of a play host and every play host (found with Ansible's own ``find_vars_files``);
* the inventory sources that are YAML or JSON files (a directory source: those files in it);
* the ``-e @FILE`` files and the inline ``-e '{...}'`` items of the command line;
* the files the task names (``files``).

A variable of :data:`SINGLE_SOURCE` (the pin) set by two files of one ``group_vars/<name>/`` folder
(or ``host_vars``) is refused too: Ansible reads them in name order and the last wins, silently.
Other variables may repeat across files (a site's ``connection.yml`` next to its ``site.yml``).

This module holds the discovery and the verdict; the action plugin only hands it Ansible's
loader functions, so the same rules are unit-tested without Ansible's runtime.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ansible_collections.gb10.dspark.plugins.module_utils.common._strict_yaml import (
    DuplicateKeyError,
    StrictYAMLError,
    loads,
    top_level_lines,
)

VARS_DIRS = ("group_vars", "host_vars")
DATA_EXTENSIONS = (".yml", ".yaml", ".json")
RANK = "control node"
# Variables that one file only may set among the files Ansible reads at one precedence (the files of
# one group_vars/<name>/ or host_vars/<name>/ folder): two release pins side by side would have the
# one read last (by name) win without a word.
SINGLE_SOURCE = ("dspark_pin",)


@dataclass(frozen=True)
class Source:
    """One place variables come from: ``name`` (a path, or ``-e item N``) and the file to read, if any;
    ``level`` names the files read at one precedence (``<folder>/group_vars/<name>``), if it is one of them."""

    name: str
    path: str | None = None
    text: str | None = None
    level: str | None = None


@dataclass(frozen=True)
class Problem:
    """A source refused: a duplicate key (``key`` and both lines), or a source that cannot be read."""

    source: str
    message: str
    key: object = None
    first_line: int | None = None
    second_line: int | None = None

    def as_dict(self) -> dict:
        return {"rank": RANK, "source": self.source, "key": None if self.key is None else str(self.key),
                "first_line": self.first_line, "second_line": self.second_line,
                "message": f"{RANK}: {self.message}"}


def basedirs(inventory_sources: Iterable[str], playbook_dir: str | None) -> list[str]:
    """Where ``host_group_vars`` looks: each inventory source's folder (itself when it is one), then
    the playbook's folder; real paths, each once, in that order."""
    out: list[str] = []
    for source in [*inventory_sources, *([playbook_dir] if playbook_dir else [])]:
        if not isinstance(source, str) or "," in source and not os.path.exists(source):
            continue  # a host list ("a,b,"), not a path
        path = os.path.realpath(source if os.path.isdir(source) else os.path.dirname(source) or ".")
        if path not in out:
            out.append(path)
    return out


def inventory_files(inventory_sources: Iterable[str]) -> list[str]:
    """The inventory sources that are YAML or JSON files; for a folder source, those files in it
    (at any depth, outside ``group_vars``/``host_vars`` and hidden entries, as Ansible reads a folder)."""
    found: list[str] = []
    for source in inventory_sources:
        if not isinstance(source, str):
            continue
        if os.path.isfile(source):
            if source.endswith(DATA_EXTENSIONS):
                found.append(os.path.realpath(source))
        elif os.path.isdir(source):
            for top, dirs, files in os.walk(source):
                dirs[:] = sorted(d for d in dirs if d not in VARS_DIRS and not d.startswith("."))
                found.extend(os.path.realpath(os.path.join(top, f)) for f in sorted(files)
                             if f.endswith(DATA_EXTENSIONS) and not f.startswith("."))
    return found


def vars_files(dirs: Iterable[str], entities: Iterable[str],
               find: Callable[[str, str], list[str]]) -> list[tuple[str, str]]:
    """The ``group_vars``/``host_vars`` files of ``entities`` under each of ``dirs``, each with its
    precedence level (``<dir>/group_vars/<name>``); ``find`` is Ansible's ``DataLoader.find_vars_files``
    (a file ``<name>[.yml|.yaml|.json]`` or a folder ``<name>/``)."""
    found: list[tuple[str, str]] = []
    names = list(dict.fromkeys(entities))
    for base in dirs:
        for sub in VARS_DIRS:
            folder = os.path.join(base, sub)
            if not os.path.isdir(folder):
                continue
            for name in names:
                found.extend((os.path.realpath(p), os.path.join(folder, name)) for p in find(folder, name))
    return found


def extra_vars(items: Iterable[str], cwd: str) -> list[Source]:
    """The ``-e`` items that are files (``@FILE``, relative to ``cwd``) or inline YAML/JSON mappings."""
    out: list[Source] = []
    for number, item in enumerate(items or (), 1):
        if not isinstance(item, str) or not item:
            continue
        if item.startswith("@"):
            path = os.path.realpath(os.path.join(cwd, os.path.expanduser(item[1:])))
            out.append(Source(path, path=path))
        elif item.lstrip()[:1] in ("{", "["):
            out.append(Source(f"-e item {number}", text=item))
    return out


def sources(inventory_sources: Iterable[str], playbook_dir: str | None, entities: Iterable[str],
            extra: Iterable[str], cwd: str, find: Callable[[str, str], list[str]],
            files: Iterable[str] = ()) -> list[Source]:
    """Every source of the play's variables, each file once, in the order listed in the module docs;
    ``files`` (relative to ``cwd``) are read as well."""
    inventory_sources = list(inventory_sources or ())
    levels: dict[str, str] = {}
    for path, level in vars_files(basedirs(inventory_sources, playbook_dir), entities, find):
        levels.setdefault(path, level)
    paths = [*levels, *inventory_files(inventory_sources), *(os.path.realpath(os.path.join(cwd, f)) for f in files)]
    out = [Source(p, path=p, level=levels.get(p)) for p in dict.fromkeys(paths)]
    seen = set(paths)
    for source in extra_vars(extra, cwd):
        if source.path is None or source.path not in seen:
            out.append(source)
            seen.add(source.path)
    return out


def check(found: Iterable[Source], read: Callable[[str], str]) -> list[Problem]:
    """Read every source strictly; ``read`` gives a file's text (Ansible's loader: decrypts a vaulted
    file). Every problem is listed; a value is never part of a message."""
    problems: list[Problem] = []
    setters: dict[tuple[str, str], tuple[str, int | None]] = {}
    for source in found:
        try:
            text = source.text if source.path is None else read(source.path)
        except Exception as exc:  # noqa: BLE001 - unreadable or undecryptable: refused, never skipped
            problems.append(Problem(source.name, f"cannot read {source.name} ({type(exc).__name__}); "
                                                 "refused, a fail-closed input must be read"))
            continue
        try:
            data = loads(text or "", source.name)
        except DuplicateKeyError as exc:
            problems.append(Problem(source.name, str(exc), exc.key, exc.first_line, exc.second_line))
            continue
        except StrictYAMLError as exc:
            problems.append(Problem(source.name, str(exc)))
            continue
        if source.level is None or not isinstance(data, dict):
            continue
        lines = top_level_lines(text or "")
        for key in SINGLE_SOURCE:
            if key not in data:
                continue
            line = lines.get(key)
            if (source.level, key) not in setters:
                setters[(source.level, key)] = (source.name, line)
                continue
            first, first_line = setters[(source.level, key)]
            problems.append(Problem(source.name, (
                f"{source.name}: {key} (line {line}) is also set by {first} (line {first_line}), a file Ansible "
                f"reads at the same precedence ({source.level}); refused, because the one read last would "
                f"silently win: keep one {key} there"), key, first_line, line))
    return problems


def summary(problems: list[Problem], count: int) -> str:
    if not problems:
        return f"{count} variable sources read, no key given twice"
    lines = [p.as_dict()["message"] for p in problems]
    head = "" if len(lines) == 1 else f"{len(lines)} variable sources refused:\n"
    return head + "\n".join(lines)

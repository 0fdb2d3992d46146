"""The text form of ``dspark render``: each rank's ``vllm serve`` argv, environment and container options.

The document is what playbooks/render.yml writes: a JSON list of ranks (sorted by pair, then rank), each
a mapping with ``host``, ``pair``, ``rank``, ``role``, ``profile``, ``profile_sha256``, ``experimental``,
``departures``, ``container``, ``image``, ``argv``, ``env``, ``options`` and ``labels``. The API key is
never in it (the playbook shows a placeholder), so everything here may be printed as it is.
"""
from __future__ import annotations

import json
import shlex
from typing import Mapping, Sequence

INDENT = "  "
CONTINUATION = " \\"


def argv_lines(argv: Sequence[str]) -> list[str]:
    """The argv as shell lines: the words before the first ``--flag`` first, then one ``--flag [value]`` per
    line, each word shell-quoted and every line but the last ending in a backslash, so it pastes back."""
    groups: list[list[str]] = []
    for word in argv:
        word = str(word)
        starts_flag = word.startswith("--")
        if not groups or starts_flag or (groups[-1][0].startswith("--") and len(groups[-1]) > 1):
            groups.append([word])
        else:
            groups[-1].append(word)
    lines = [(INDENT if i else "") + " ".join(shlex.quote(w) for w in group) for i, group in enumerate(groups)]
    return [line + CONTINUATION for line in lines[:-1]] + lines[-1:]


def _scalar(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    return json.dumps(value, separators=(", ", ": "), sort_keys=True)


def _option_lines(options: Mapping) -> list[str]:
    lines = []
    for key in sorted(options):
        value = options[key]
        if isinstance(value, list) and value and all(isinstance(item, Mapping) for item in value):
            lines.append(f"{INDENT}{key}:")
            lines += [f"{INDENT * 2}- {_scalar(item)}" for item in value]
        else:
            lines.append(f"{INDENT}{key}: {_scalar(value)}")
    return lines


def format_rank(rank: Mapping) -> str:
    """One rank: a header line (pair, host, rank and role), then profile, image, argv, env, options, labels."""
    image = rank.get("image") or {}
    departures = rank.get("departures") or []
    lines = [
        f"== pair {rank.get('pair')}  host {rank.get('host')}  rank {rank.get('rank')} ({rank.get('role')})",
        f"profile: {rank.get('profile')}  sha256 {rank.get('profile_sha256')}  "
        f"experimental: {_scalar(bool(rank.get('experimental')))}",
        "departures: " + ("none" if not departures else "; ".join(_scalar(d) for d in departures)),
        f"container: {rank.get('container')}",
        f"image: {image.get('tag')}",
        f"{INDENT}id {image.get('id')}",
    ]
    if image.get("containerd_id"):
        lines.append(f"{INDENT}containerd image store: {image.get('containerd_id')}")
    if image.get("note"):
        lines.append(f"{INDENT}{image.get('note')}")
    lines.append("argv:")
    lines += [INDENT + line for line in argv_lines(rank.get("argv") or [])]
    env = rank.get("env") or {}
    lines.append("env:")
    lines += [f"{INDENT}{key}={_scalar(env[key])}" for key in sorted(env)]
    lines.append("options:")
    lines += _option_lines(rank.get("options") or {})
    labels = rank.get("labels") or {}
    lines.append("labels:")
    lines += [f"{INDENT}{key}={_scalar(labels[key])}" for key in sorted(labels)]
    return "\n".join(lines) + "\n"


def format_document(doc: Sequence[Mapping]) -> str:
    """Every rank in the document's order, a blank line between them."""
    return "\n".join(format_rank(rank) for rank in doc)


def read_document(path: str) -> list[dict]:
    """The render the playbook wrote to ``path``; ValueError when it is not one."""
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from exc
    if not isinstance(doc, list):
        raise ValueError(f"{path} holds no list of ranks")
    for item in doc:
        if not isinstance(item, dict) or not {"host", "pair", "rank", "argv", "env"} <= set(item):
            raise ValueError(f"{path}: an entry is not a rank (host, pair, rank, argv, env)")
    return doc

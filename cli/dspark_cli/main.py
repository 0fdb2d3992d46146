"""`dspark`: run the gb10.dspark playbooks through ansible-runner, with live progress per GB10 pair.

    dspark <command> [-i PATH] [--limit PATTERN | --all] [-e KEY=VALUE|@FILE|{...} ...] [--check] [--diff]
                     [-t TAGS] [--skip-tags TAGS] [-f N] [-u USER] [--private-key FILE] [-b] [--become-user USER]
                     [-K] [--vault-id ID] [--vault-password-file FILE] [-J] [--artifacts DIR] [-v] [--json]
    dspark render --profile NAME [--json] [the options above]

Ansible's options go to ansible-playbook unchanged (``-e`` items through private files, see
``extravars_argv``). Every run gets its own folder ``<artifacts>/<command>-<UTC time>-<random>`` holding
ansible-runner's artifacts (``stdout``, ``job_events/``, ``rc``, ``status``) and, for ``audit`` and
``status``, the report; for ``render``, the render itself (``render.json``), which alone goes to stdout:
progress goes to stderr. With ``--json`` (any command but ``render``, whose ``--json`` prints the render
as JSON) stdout holds one JSON summary of the run and everything else goes to stderr.
"""
from __future__ import annotations

import argparse
import configparser
import dataclasses
import datetime
import functools
import getpass
import importlib.util
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Mapping, TextIO

import yaml

from . import version
from .progress import Progress, decide_exit, failing_hosts, failing_pairs, host_counts, one_line, pair_map
from .render import format_document, read_document

# Finished run folders kept under --artifacts: cron audits every 15 minutes make 96 a day.
KEEP_RUNS = 200
EX_USAGE = 64
EX_UNAVAILABLE = 69
EXIT_SIGINT = 130  # 128 + the signal's number, as a shell reports a process a signal ended
EXIT_SIGTERM = 143
EXIT_SIGHUP = 129
EXIT_SIGQUIT = 131
# The signals that stop a run: Ctrl-C, SIGTERM, a dropped session (SIGHUP) and Ctrl-\ (SIGQUIT). Each
# leaves no private -e file behind and a scrubbed ``command`` artifact; dspark exits 128 + its number.
CANCEL_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
INVENTORY_TIMEOUT = 300
GRACE_SECONDS = 15.0
AUDIT_DIR_VAR = "dspark_audit_report_dir"
RENDER_OUTPUT_VAR = "dspark_render_output"
RENDER_PROFILE_VAR = "dspark_profile_name"
RENDER_FILE = "render.json"
DSPARK_VARS_FILE = "dspark-vars.json"

PLAYBOOKS = {
    "preflight": "gb10.dspark.preflight",
    "provision": "gb10.dspark.provision",
    "rollback": "gb10.dspark.rollback",
    "rollforward": "gb10.dspark.rollforward",
    "release_rollback": "gb10.dspark.release_rollback",
    "rollout": "gb10.dspark.rollout",
    "audit": "gb10.dspark.audit",
    "status": "gb10.dspark.audit",
    "guard": "gb10.dspark.guard",
    "niah": "gb10.dspark.niah",
    "systems": "gb10.dspark.systems",
    "pubsuite": "gb10.dspark.pubsuite",
    "evidence": "gb10.dspark.evidence",
    "teardown": "gb10.dspark.teardown",
    "render": "gb10.dspark.render",
}

# What each playbook does, from its header comment.
HELP = {
    "preflight": "identity preflight of pairs: the pin, the inventory's pairs, a clean checkout, the runtime manifest, "
                 "and on every rank the GPU, fabric links and model checkpoint, then what holds the engine's name "
                 "and the master port (changes nothing)",
    "provision": "provision pairs end to end: identity preflight, the pinned image on both ranks, the serving profile, "
                 "the dual-rank engine (worker first, then the head), the readiness wait and the runtime gate "
                 "(a converged pair is left alone)",
    "rollback": "--to breakable-ab (the default): roll pairs back to the breakable CUDA-graph A/B profile with "
                "the image they already hold: preflight, both engines replaced together (refused while the head "
                "serves), the runtime gate, the evidence; --forward rolls forward to production. --to previous: "
                "return pairs to the release each ran before (its pin, profile and image, recorded on both ranks; "
                "nothing copied), gated; needs --limit or --all",
    "rollout": "roll a new release (--release FILE: its pin and image archive) out in waves: the canary pair(s) "
               "provisioned, gated and guarded first (a failing canary halts the run, no other pair touched), the "
               "image staged on the other pairs, then waves of dspark_rollout_wave_pairs whole pairs, each drained "
               "and gated before the next; a per-wave report in the evidence",
    "audit": "audit the fleet, read-only: one verdict per pair (OK, DRIFT, DOWN, HUNG, UNREACHABLE), a report "
             "(text, HTML, JSON) and the drift table; exit 2 when a pair is not OK",
    "status": "the audit of the pairs named by --limit (or of every pair with --all): read-only, prints their "
              "drift table; exit 2 when one is not OK",
    "guard": "the serving accuracy guard on each pair's head: 64 prompts x 128 tokens, the completion contract per "
             "answer and an accuracy set; the report goes into the pair's evidence, which is then packed",
    "niah": "max-context needle-in-a-haystack: switch each pair to the long-context profile, gate it, run the "
            "25/50/90 percent ladder on the head, pack the evidence (a run still going on is waited for, not restarted)",
    "systems": "the systems lanes on each pair's head: canary, latency, concurrency ladder, decode and prefill "
               "throughput, speculative-decoding acceptance, the external benchmark client; then packs the evidence",
    "pubsuite": "the one-shot publication suite: NIAH, the production profile launched and gated, the systems lanes, "
                "the reproducibility checks, the publication pack; run again, it skips the stages already finished",
    "evidence": "pack each pair's evidence: the pin, rendered profiles, docker inspect of both ranks, this run's "
                "results, SHA256SUMS and index.md (with invalid_for_publish and every reason)",
    "teardown": "take pairs out of service: stop and remove the engine on both ranks (refused while the head serves, "
                "unless dspark_engine_force_replace=true) and leftover labelled containers; images and models stay "
                "unless asked; needs --limit or --all",
    "render": "print each rank's vllm serve argv, environment and container options (contacts no host)",
}

# Where `dspark rollback --to` goes: the breakable A/B profile on the same release (playbooks/rollback.yml), or the
# release the pair ran before (playbooks/release_rollback.yml).
ROLLBACK_TO = ("breakable-ab", "previous")
# Commands that act on every pair when no --limit is given: they want --limit or an explicit --all.
NEEDS_TARGET = frozenset({"rollback", "teardown", "status"})
# Commands that run the audit and print its report.
AUDIT_COMMANDS = frozenset({"audit", "status"})

# ansible-playbook's prompts, as regular expressions for ansible-runner's `passwords`.
VAULT_PROMPT = r"Vault password:\s*?$"
BECOME_PROMPT = r"BECOME password:\s*?$"
ANY_VAULT_ID_PROMPT = r"Vault password \([^)]*\):\s*?$"


class UsageError(Exception):
    """A command-line or environment problem: exit 64."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 64 (EX_USAGE), not 2: 2 means failed hosts
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


class _Version(argparse.Action):
    """``dspark --version``: the command, the collection and its pin (:mod:`dspark_cli.version`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            paths = collection_search_paths()
        except Exception as exc:  # an ansible.cfg ansible-core cannot read
            parser.exit(EX_UNAVAILABLE, f"dspark: Ansible's configuration cannot be read: {exc}\n")
        found = version.report(paths, _SafeStream(sys.stdout), _SafeStream(sys.stderr))
        parser.exit(0 if found else EX_UNAVAILABLE)


def _keep_runs(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _forks(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    opts = common.add_argument_group("run options")
    opts.add_argument("-i", "--inventory", metavar="PATH",
                      help="inventory file or folder (default: $DSPARK_INVENTORY)")
    opts.add_argument("-l", "--limit", metavar="PATTERN", help="limit the run to these hosts or groups")
    opts.add_argument("--all", action="store_true",
                      help="act on every pair of the inventory: what rollback, teardown and status need "
                           "without --limit (not with --limit)")
    opts.add_argument("--artifacts", metavar="DIR",
                      help="where run folders go (default: $DSPARK_ARTIFACTS or ./artifacts/runs)")
    opts.add_argument("--keep-runs", dest="keep_runs", type=_keep_runs, metavar="N",
                      help=f"after the run, remove the oldest finished run folders beyond the newest N (default: "
                           f"$DSPARK_KEEP_RUNS or {KEEP_RUNS}; 0 keeps every folder)")
    opts.add_argument("-v", "--verbose", action="count", default=0,
                      help="ansible verbosity in the run's stdout artifact (-vvv for more)")
    ansible = common.add_argument_group("ansible-playbook options (passed on with ansible-playbook's meaning)")
    ansible.add_argument("-e", "--extra-vars", dest="extra_vars", action="append", default=[],
                         metavar="KEY=VALUE|@FILE|{...}",
                         help="extra variables: KEY=VALUE (a string, as in ansible), a YAML/JSON file (may be "
                              "vaulted) or an inline mapping; repeatable, the last one wins")
    ansible.add_argument("-C", "--check", action="store_true", help="run in check mode (changes nothing)")
    ansible.add_argument("-D", "--diff", action="store_true", help="show the differences in changed files")
    ansible.add_argument("-t", "--tags", action="append", default=[], metavar="TAGS",
                         help="run only tasks tagged with these (preflight, image, profile, engine, gate, evidence, "
                              "...; docs/operator-guide.md, 2.5: a selection out of the fail-closed order is "
                              "refused); repeatable")
    ansible.add_argument("--skip-tags", dest="skip_tags", action="append", default=[], metavar="TAGS",
                         help="skip tasks tagged with these; repeatable")
    ansible.add_argument("-f", "--forks", type=_forks, metavar="N", help="parallel processes")
    ansible.add_argument("-u", "--user", metavar="USER", help="connect as this user")
    ansible.add_argument("--private-key", "--key-file", dest="private_key", metavar="FILE",
                         help="SSH private key file")
    ansible.add_argument("-b", "--become", action="store_true", help="run operations with become")
    ansible.add_argument("--become-user", dest="become_user", metavar="USER", help="become this user")
    ansible.add_argument("-K", "--ask-become-pass", dest="ask_become_pass", action="store_true",
                         help="ask for the become password (dspark asks before the run)")
    ansible.add_argument("--vault-id", dest="vault_ids", action="append", default=[], metavar="ID",
                         help="vault identity (LABEL@FILE, LABEL@prompt); repeatable")
    ansible.add_argument("--vault-password-file", "--vault-pass-file", dest="vault_password_files",
                         action="append", default=[], metavar="FILE", help="vault password file; repeatable")
    ansible.add_argument("-J", "--ask-vault-pass", "--ask-vault-password", dest="ask_vault_pass",
                         action="store_true", help="ask for the vault password (dspark asks before the run)")

    parser = _Parser(prog="dspark", description="Run the gb10.dspark playbooks with live progress per GB10 pair.",
                     epilog="Exit codes (docs/operator-guide.md, 2.4): 0 success; else the playbook's rc: 2 failed "
                            "hosts or audit drift, 4 an unreachable host; 64 usage, 69 no ansible-playbook (or, for "
                            "--version, no gb10.dspark); 130 interrupted (Ctrl-C), 143 on SIGTERM, 129 on SIGHUP (the "
                            "session dropped), 131 on SIGQUIT: the run was stopped.")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="show dspark's version, the gb10.dspark collection Ansible runs from this folder and "
                             "that collection's pin, and exit (69 when Ansible finds no gb10.dspark here)")
    sub = parser.add_subparsers(dest="command", metavar="<command>", required=True, parser_class=_Parser)
    for name, text in HELP.items():
        cmd = sub.add_parser(name, parents=[common], help=text, description=f"{text} ({PLAYBOOKS[name]})")
        if name == "rollback":
            cmd.add_argument("--forward", action="store_true",
                             help=f"roll forward instead ({PLAYBOOKS['rollforward']}: production, or "
                                  "dspark_rollforward_profile)")
            cmd.add_argument("--to", choices=ROLLBACK_TO, default="breakable-ab",
                             help=f"breakable-ab (default, {PLAYBOOKS['rollback']}): the A/B profile, same release; "
                                  f"previous ({PLAYBOOKS['release_rollback']}): the release the pair ran before")
        if name == "rollout":
            cmd.add_argument("--release", required=True, metavar="FILE",
                             help="the release file (dspark_pin and dspark_image_archive), passed on as -e @FILE "
                                  "before any other -e")
        if name == "render":
            cmd.add_argument("--profile", required=True, metavar="NAME",
                             help="the serving profile to render: production, long-1m or breakable-ab "
                                  "(the playbook checks the name)")
            cmd.add_argument("--json", action="store_true",
                             help="print the render as JSON (a list of ranks) instead of text")
        else:
            cmd.add_argument("--json", action="store_true",
                             help="print one JSON summary of the run on stdout; progress and reports go to stderr")
    return parser


def playbook_name(args: argparse.Namespace) -> str:
    """The short name of what runs: the command, ``rollforward`` for ``rollback --forward``, or
    ``release_rollback`` for ``rollback --to previous``."""
    if args.command == "rollback" and getattr(args, "to", "breakable-ab") == "previous":
        return "release_rollback"
    if args.command == "rollback" and getattr(args, "forward", False):
        return "rollforward"
    return args.command


def playbook_for(args: argparse.Namespace) -> str:
    return PLAYBOOKS[playbook_name(args)]


def check_target(args: argparse.Namespace) -> None:
    """rollback, teardown and status act on the pairs named by --limit, or on all of them with --all only."""
    if getattr(args, "to", None) == "previous" and getattr(args, "forward", False):
        raise UsageError("--forward and --to previous exclude each other: --forward switches the profile to "
                         "production; --to previous returns the pair to its previous release")
    if args.all and args.limit is not None:
        raise UsageError("--all and --limit exclude each other: --limit names the pairs, --all means every pair")
    if args.command not in NEEDS_TARGET or args.limit or args.all:
        return
    if args.command == "status":
        raise UsageError("status needs the pairs to look at: --limit PATTERN (e.g. --limit pair_sim01), "
                         "or --all for every pair (that is `dspark audit`)")
    raise UsageError(f"{args.command} refuses to act on every pair of the inventory: name the pairs with "
                     "--limit PATTERN (e.g. --limit pair_sim01), or pass --all")


def release_extravars(args: argparse.Namespace) -> list[str]:
    """The ``-e`` items of the run: a rollout's ``--release FILE`` first (as ``@FILE``; a later ``-e`` wins)."""
    release = getattr(args, "release", None)
    return ([f"@{release}"] if release else []) + list(args.extra_vars)


def _abspath(path: str, cwd: str) -> str:
    return os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))


def resolve_inventory(value: str | None, environ: Mapping[str, str], cwd: str) -> str:
    """The inventory as an absolute path: --inventory, else $DSPARK_INVENTORY; it must exist."""
    source = value or environ.get("DSPARK_INVENTORY")
    if not source:
        raise UsageError("no inventory: pass --inventory PATH or set DSPARK_INVENTORY "
                         "(e.g. DSPARK_INVENTORY=inventories/sim)")
    path = _abspath(source, cwd)
    if not os.path.exists(path):
        raise UsageError(f"inventory {path} does not exist")
    return path


def artifacts_base(value: str | None, environ: Mapping[str, str], cwd: str) -> str:
    return _abspath(value or environ.get("DSPARK_ARTIFACTS") or os.path.join("artifacts", "runs"), cwd)


# ---- ansible-playbook's options ----------------------------------------------------------------------
# ansible-runner starts ansible-playbook in the run folder, so every path is made absolute against the
# folder dspark runs from: the file is the one the operator named.

def _split_vault_id(vault_id: str) -> tuple[str | None, str]:
    """(label, source) as ansible splits ``--vault-id``: at the first ``@``; no ``@``: all of it is the source."""
    if "@" not in vault_id:
        return None, vault_id
    label, source = vault_id.split("@", 1)
    return label, source


def _vault_id_arg(vault_id: str, cwd: str) -> str:
    label, source = _split_vault_id(vault_id)
    if source in ("", "prompt", "prompt_ask_vault_pass"):
        return vault_id
    source = _abspath(source, cwd)
    return source if label is None else f"{label}@{source}"


def ansible_options(args: argparse.Namespace, cwd: str) -> list[str]:
    """ansible-playbook's own options given to dspark (all but -e, --limit and -v), in argv form."""
    argv: list[str] = []
    if args.check:
        argv.append("--check")
    if args.diff:
        argv.append("--diff")
    for tags in args.tags:
        argv += ["--tags", tags]
    for tags in args.skip_tags:
        argv += ["--skip-tags", tags]
    if args.forks is not None:
        argv += ["--forks", str(args.forks)]
    if args.user is not None:
        argv += ["--user", args.user]
    if args.private_key:
        argv += ["--private-key", _abspath(args.private_key, cwd)]
    if args.become:
        argv.append("--become")
    if args.become_user is not None:
        argv += ["--become-user", args.become_user]
    if args.ask_become_pass:
        argv.append("--ask-become-pass")
    for vault_id in args.vault_ids:
        argv += ["--vault-id", _vault_id_arg(vault_id, cwd)]
    for path in args.vault_password_files:
        argv += ["--vault-password-file", _abspath(path, cwd)]
    if args.ask_vault_pass:
        argv.append("--ask-vault-pass")
    return argv


def password_prompts(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(what dspark asks, the regular expression of ansible-playbook's prompt) for each password to give."""
    labelled: list[tuple[str, str]] = []
    generic: list[tuple[str, str]] = []
    if args.ask_vault_pass:
        generic.append(("Vault password: ", VAULT_PROMPT))
    for vault_id in args.vault_ids:
        label, source = _split_vault_id(vault_id)
        if source == "prompt_ask_vault_pass":
            generic.append(("Vault password: ", VAULT_PROMPT))
        elif source == "prompt" and label:
            labelled.append((f"Vault password ({label}): ", rf"Vault password \({re.escape(label)}\):\s*?$"))
        elif source == "prompt":
            generic.append(("Vault password (default vault id): ", ANY_VAULT_ID_PROMPT))
    if args.ask_become_pass:
        generic.append(("BECOME password: ", BECOME_PROMPT))
    prompts: list[tuple[str, str]] = []
    for prompt, pattern in labelled + generic:  # a labelled prompt before the catch-all one
        if pattern not in (p for _unused, p in prompts):
            prompts.append((prompt, pattern))
    return prompts


def ask_passwords(prompts: list[tuple[str, str]]) -> dict[str, str] | None:
    """Ask each password (getpass: on the terminal, else stderr) for ansible-runner's ``passwords``:
    ansible-runner answers ansible-playbook's prompt with it; it goes to no argv, environment or file."""
    if not prompts:
        return None
    answers = {}
    for prompt, pattern in prompts:
        try:
            answers[pattern] = getpass.getpass(prompt)
        except EOFError:
            raise UsageError(f"no answer to {prompt.strip()!r} (no terminal and stdin closed)") from None
    return answers


# ---- extra vars --------------------------------------------------------------------------------------

class Opaque:
    """A YAML value under a tag dspark does not read (``!vault``, ``!unsafe``): given, value unknown."""

    def __init__(self, tag: str):
        self.tag = tag

    def __repr__(self) -> str:  # never the value
        return f"Opaque({self.tag})"


class _TolerantLoader(yaml.SafeLoader):
    """SafeLoader that reads unknown tags (ansible's ``!vault``, ``!unsafe``) as opaque values."""


_TolerantLoader.add_constructor(None, lambda loader, node: Opaque(node.tag))


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_TolerantLoader)  # a SafeLoader subclass


def read_vars_file(path: str) -> dict | None:
    """The variables of a ``-e @FILE`` when dspark can read them (plain YAML/JSON mapping), else None
    (a vault-encrypted file, a file that does not parse: ansible-playbook reads those)."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = load_yaml(handle.read())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return data if isinstance(data, dict) else None


@dataclasses.dataclass(frozen=True)
class ExtraVar:
    """One ``-e`` item: ``file`` (an @FILE, handed on by absolute path), ``kv`` (KEY=VALUE pairs: strings)
    or ``inline`` (a YAML/JSON mapping, written verbatim). ``data`` is what dspark could read of it."""

    kind: str
    value: Any
    data: dict | None


def _parse_kv(item: str, number: int) -> dict[str, str]:
    from ansible.parsing.splitter import parse_kv  # ansible-playbook's own KEY=VALUE split

    try:
        pairs = parse_kv(item)
    except Exception as exc:  # AnsibleParserError: unbalanced quotes, ...
        raise UsageError(f"-e item {number}: not KEY=VALUE pairs ansible can split ({exc.__class__.__name__})") from None
    if "_raw_params" in pairs:
        keys = [str(key) for key in pairs if key != "_raw_params"]
        raise UsageError(f"-e item {number}" + (f" (keys {', '.join(keys)})" if keys else "")
                         + ": expected KEY=VALUE (several separated by spaces), @FILE or an inline {...} mapping")
    return {str(key): str(value) for key, value in pairs.items()}


def parse_extravars(items: list[str], cwd: str) -> list[ExtraVar]:
    """The ``-e`` items, in order, as ansible-playbook reads them; values are never echoed in errors."""
    plan = []
    for number, item in enumerate(items, 1):
        if not item:
            continue  # ansible-playbook skips an empty -e
        if item.startswith("@"):
            path = _abspath(item[1:], cwd)
            if not os.path.isfile(path):
                raise UsageError(f"-e {item}: no such file ({path})")
            plan.append(ExtraVar("file", path, read_vars_file(path)))
        elif item[0] in "/.":
            raise UsageError(f"-e item {number}: a file of variables is given as @FILE (ansible-playbook: "
                             "prepend the file name with '@')")
        elif item[0] in "[{":
            try:
                data = load_yaml(item)
            except yaml.YAMLError:
                raise UsageError(f"-e item {number}: not a valid inline YAML/JSON mapping") from None
            if not isinstance(data, dict):
                raise UsageError(f"-e item {number}: an inline value must be a mapping of variables")
            plan.append(ExtraVar("inline", item, data))
        else:
            pairs = _parse_kv(item, number)
            if pairs:
                plan.append(ExtraVar("kv", pairs, pairs))
    return plan


def known_vars(plan: list[ExtraVar]) -> dict:
    """The variables dspark can read from the ``-e`` items, merged in order (the last one wins)."""
    known: dict = {}
    for var in plan:
        known.update(var.data or {})
    return known


def _write_private(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def _write_private_json(path: str, data: object) -> None:
    _write_private(path, json.dumps(data))


def extravars_argv(plan: list[ExtraVar], private: str) -> list[str]:
    """``-e @FILE`` for each item, in order. KEY=VALUE pairs and inline mappings may hold secrets
    (dspark_api_key): each is written to its own file (mode 0600) in ``private``, never to argv.
    KEY=VALUE values are strings in ansible-playbook, so they are written as JSON strings."""
    argv = []
    for number, var in enumerate(plan, 1):
        if var.kind == "file":
            path = var.value
        elif var.kind == "kv":
            path = os.path.join(private, f"extravars-{number:02d}.json")
            _write_private_json(path, var.value)
        else:
            path = os.path.join(private, f"extravars-{number:02d}.yml")
            _write_private(path, var.value)
        argv += ["-e", f"@{path}"]
    return argv


def _plain_path(value: object) -> bool:
    return isinstance(value, str) and value != "" and "{{" not in value


def new_run_dir(base: str, name: str, now: datetime.datetime | None = None, token: str | None = None) -> str:
    """Create ``<base>/<name>-<yyyymmddTHHMMSSZ>-<token>`` (mode 0700) and return it."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = now.astimezone(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = os.path.join(base, f"{name}-{stamp}-{token or secrets.token_hex(3)}")
    os.makedirs(base, exist_ok=True)
    os.mkdir(path, 0o700)
    return path


# A run folder's name (new_run_dir): the command, the UTC start time and a random token.
RUN_DIR_NAME = re.compile(r"^[a-z_]+-(\d{8}T\d{6}Z)-[0-9a-f]+$")


def keep_runs(value: int | None, environ: Mapping[str, str]) -> int:
    """How many finished run folders to keep: ``--keep-runs``, else $DSPARK_KEEP_RUNS, else KEEP_RUNS."""
    if value is not None:
        return value
    text = environ.get("DSPARK_KEEP_RUNS", "").strip()
    return _keep_runs(text) if text else KEEP_RUNS


def rotate_runs(base: str, keep: int, current: str) -> list[str]:
    """Remove the oldest finished run folders of ``base`` beyond the newest ``keep``; return what was removed.

    Only dspark's own run folders are candidates (named as :func:`new_run_dir` names them), and only finished
    ones: ansible-runner writes ``rc`` when its run ends, so a run still going (another dspark beside this one)
    or one that died before its end is kept. ``current`` is never removed. ansible-runner's own
    ``rotate_artifacts`` is not used: it removes every entry of the folder, oldest modification first, running
    runs and foreign files included."""
    if keep <= 0:
        return []
    finished = []
    for name in os.listdir(base):
        path = os.path.join(base, name)
        match = RUN_DIR_NAME.match(name)
        if match and path != current and os.path.isdir(path) and not os.path.islink(path) \
                and os.path.isfile(os.path.join(path, "rc")):
            finished.append((match[1], name, path))
    finished.sort()
    removed = []
    for _stamp, _name, path in finished[:max(0, len(finished) - keep)]:
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _config_bool(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")


def _config_option(config_path: str | None, option: str) -> str | None:
    """An option of ``[defaults]`` in the Ansible configuration file that applies (None when unset)."""
    candidates = [config_path] if config_path else [os.path.expanduser("~/.ansible.cfg"), "/etc/ansible/ansible.cfg"]
    for path in candidates:
        if path and os.path.isfile(path):
            parser = configparser.ConfigParser(interpolation=None, strict=False)
            try:
                parser.read(path, encoding="utf-8")
            except (configparser.Error, OSError, UnicodeDecodeError):
                return None
            return parser.get("defaults", option) if parser.has_option("defaults", option) else None
    return None


def _host_key_checking(config_path: str | None) -> str:
    """What the Ansible configuration says about host key checking (ansible's default: True)."""
    value = _config_option(config_path, "host_key_checking")
    return "True" if value is None else str(_config_bool(value))


SUMMARY_CALLBACK = "gb10.dspark.pair_summary"
PAIRS_FILE = "pairs.json"


def callbacks_enabled(environ: Mapping[str, str], config_path: str | None) -> str:
    """ANSIBLE_CALLBACKS_ENABLED for the run: what the environment or the configuration enables, and the run's pair
    summary (gb10.dspark.pair_summary), which ``dspark`` prints and returns with ``--json``."""
    given = environ.get("ANSIBLE_CALLBACKS_ENABLED")
    if given is None:
        given = _config_option(config_path, "callbacks_enabled") or ""
    names = [n.strip() for n in given.split(",") if n.strip()]
    return ",".join(names + ([SUMMARY_CALLBACK] if SUMMARY_CALLBACK not in names else []))


def runner_envvars(environ: Mapping[str, str], cwd: str, executable: str | None = None) -> dict[str, str]:
    """Environment variables handed to ansible-runner on top of the inherited environment.

    - PATH starts with the folder of this Python (the virtualenv's bin), so ``ansible-playbook`` is found;
    - ANSIBLE_CONFIG points at ``./ansible.cfg`` of the invoking folder (the runner runs elsewhere),
      or at the absolute form of an ANSIBLE_CONFIG already set;
    - ANSIBLE_HOST_KEY_CHECKING keeps the configured value (ansible-runner would otherwise turn it off);
    - ANSIBLE_CALLBACKS_ENABLED adds the run's pair summary to what is enabled already (:func:`callbacks_enabled`).
    """
    bindir = os.path.dirname(executable or sys.executable)
    path = environ.get("PATH", os.defpath)
    entries = path.split(os.pathsep) if path else []
    if bindir and (not entries or entries[0] != bindir):
        path = os.pathsep.join([bindir, *entries])
    envvars = {"PATH": path}
    config = environ.get("ANSIBLE_CONFIG")
    if config:
        envvars["ANSIBLE_CONFIG"] = _abspath(config, cwd)
    elif os.path.isfile(os.path.join(cwd, "ansible.cfg")):
        envvars["ANSIBLE_CONFIG"] = os.path.join(cwd, "ansible.cfg")
    if "ANSIBLE_HOST_KEY_CHECKING" not in environ:
        envvars["ANSIBLE_HOST_KEY_CHECKING"] = _host_key_checking(envvars.get("ANSIBLE_CONFIG"))
    envvars["ANSIBLE_CALLBACKS_ENABLED"] = callbacks_enabled(environ, envvars.get("ANSIBLE_CONFIG"))
    return envvars


PAIR_MODULE = "ansible_collections.gb10.dspark.plugins.module_utils.fleet._pair"
PROGRESS_PLUGIN = "ansible_collections.gb10.dspark.plugins.callback.progress"
RUN_SUMMARY = "ansible_collections.gb10.dspark.plugins.module_utils.fleet._run_summary"


def _collection_module(name: str):
    """A module of the collection, imported through ansible-core's collection loader, set up as
    ansible-playbook sets it up (the configured collections paths, then ``sys.path``), unless the
    collection is importable already; None when it cannot be found or loaded."""
    try:
        try:
            return importlib.import_module(name)
        except ImportError:
            from ansible.plugins.loader import init_plugin_loader  # pylint: disable=import-outside-toplevel
            from ansible.utils.collection_loader import AnsibleCollectionConfig  # pylint: disable=import-outside-toplevel

            if AnsibleCollectionConfig.collection_finder is None:
                init_plugin_loader()
            return importlib.import_module(name)
    except Exception:  # no collection, or an ansible.cfg ansible-core cannot read
        return None


@functools.lru_cache(maxsize=None)
def collection_pairing():
    """The collection's ``_pair`` module (plugins/module_utils/fleet/_pair.py), whose ``host_records`` and
    ``pairs_of`` group hosts into pairs as the topology does, or None when it cannot be found or loaded
    (hosts are then shown by name)."""
    module = _collection_module(PAIR_MODULE)
    return module if callable(getattr(module, "pairs_of", None)) and callable(getattr(module, "host_records", None)) else None


@functools.lru_cache(maxsize=None)
def collection_progress():
    """The ``texts`` function of the collection's gb10.dspark.progress callback (plugins/callback/progress.py):
    a task result's progress lines (a pair's start-up phases, its READY line) in the one format that
    ansible-playbook, ansible-navigator and AWX show; None when the collection cannot be loaded."""
    texts = getattr(_collection_module(PROGRESS_PLUGIN), "texts", None)
    return texts if callable(texts) else None


def read_pairs(run_dir: str, info: TextIO) -> list | None:
    """The run's pair summary (``pairs.json``, written by gb10.dspark.pair_summary), printed as the callback prints
    it; None when the run wrote none (it ended before any play, or the summary was switched off)."""
    try:
        with open(os.path.join(run_dir, PAIRS_FILE), encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return None
    pairs = doc.get("pairs") if isinstance(doc, dict) else None
    if not isinstance(pairs, list):
        return None
    table = getattr(_collection_module(RUN_SUMMARY), "table", None)
    if callable(table):
        print(table(pairs, str(doc.get("playbook") or "")), file=info)
    return pairs


def load_pair_map(inventory: str, env: Mapping[str, str], cwd: str, err: TextIO) -> dict[str, str]:
    """Host -> pair from ``ansible-inventory --list``, grouped by the collection's own ``_pair`` (the topology's
    grouping); on any trouble warn and show hosts by name."""
    pairing = collection_pairing()
    if pairing is None:
        print("dspark: warning: the collection's pairing (gb10.dspark _pair.py) could not be loaded; "
              "hosts are shown without their pair", file=err)
        return {}
    tool = shutil.which("ansible-inventory", path=env.get("PATH"))
    if tool is None:
        print("dspark: warning: ansible-inventory not found; hosts are shown without their pair", file=err)
        return {}
    try:
        proc = subprocess.run([tool, "-i", inventory, "--list"], env=dict(env), cwd=cwd, capture_output=True,
                              text=True, timeout=INVENTORY_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        print("dspark: warning: ansible-inventory timed out; hosts are shown without their pair", file=err)
        return {}
    if proc.returncode != 0:
        print(f"dspark: warning: ansible-inventory failed (rc {proc.returncode}); "
              "hosts are shown without their pair", file=err)
        return {}
    try:
        return pair_map(json.loads(proc.stdout), pairing)
    except (ValueError, AttributeError):
        print("dspark: warning: ansible-inventory printed no JSON; hosts are shown without their pair", file=err)
        return {}


def report_audit(report_dir: str, out: TextIO) -> dict | None:
    """Print ``audit.txt`` and the paths of ``audit.html`` and ``audit.json``; return ``audit.json`` or None."""
    txt = os.path.join(report_dir, "audit.txt")
    html = os.path.join(report_dir, "audit.html")
    data = os.path.join(report_dir, "audit.json")
    if os.path.isfile(txt):
        with open(txt, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        out.write(text if text.endswith("\n") else text + "\n")
    else:
        print(f"no audit report in {report_dir}", file=out)
    if os.path.isfile(html):
        print(f"audit html: {html}", file=out)
    doc = None
    if os.path.isfile(data):
        print(f"audit json: {data}", file=out)
        try:
            with open(data, encoding="utf-8") as handle:
                doc = json.load(handle)
        except (OSError, ValueError):
            print(f"dspark: warning: {data} is not readable JSON", file=out)
            doc = None
        if not isinstance(doc, dict):
            doc = None
    out.flush()
    return doc


_ENV_KEEP = frozenset({"PATH", "HOME", "LANG", "LC_ALL", "PWD", "USER", "VIRTUAL_ENV"})
_ENV_KEEP_PREFIXES = ("ANSIBLE_", "RUNNER_", "AWX_")
NOT_RECORDED = "(not recorded)"
# The collection's one rule for secret NAMES lives in this file of the collection.
SECRETS_FILE = ("plugins", "module_utils", "common", "_secrets.py")


def collection_search_paths() -> list[str]:
    """Where ansible-playbook looks for the collection, in its order: the configured collections paths
    (ANSIBLE_COLLECTIONS_PATH, ``collections_path`` of the ansible.cfg in use, else Ansible's defaults),
    then ``sys.path`` when Ansible scans it (COLLECTIONS_SCAN_SYS_PATH, the default)."""
    from ansible import constants as C  # pylint: disable=import-outside-toplevel  # read only when needed

    paths = [str(path) for path in C.COLLECTIONS_PATHS or []]
    if C.COLLECTIONS_SCAN_SYS_PATH:
        paths += [path for path in sys.path if path]
    return paths


@functools.lru_cache(maxsize=None)
def collection_secrets():
    """The collection's ``_secrets`` module (plugins/module_utils/common/_secrets.py), which decides which names
    are secret for the collection and for dspark alike, or None when it cannot be found or loaded.

    dspark is a Python package of its own, installed beside the collection rather than inside it, so
    ``import ansible_collections.gb10.dspark...`` works only where a collections folder happens to be on
    ``sys.path``. dspark therefore finds the collection where ansible-playbook does (ansible-core's
    configured collections paths, then ``sys.path``) and loads that one file, which needs the standard
    library only; it keeps no copy of the rule."""
    try:
        paths = collection_search_paths()
    except Exception:  # an ansible.cfg ansible-core cannot read: no rule, see scrub_command_artifact
        return None
    for collection in version.collection_dirs(paths):
        path = os.path.join(collection, *SECRETS_FILE)
        if not os.path.isfile(path):
            continue
        try:
            spec = importlib.util.spec_from_file_location("dspark_cli._collection_secrets", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except (ImportError, OSError, SyntaxError):
            return None
        return module if callable(getattr(module, "is_secret_name", None)) else None
    return None


def _env_recordable(key: str, is_secret_name) -> bool:
    if is_secret_name(key):
        return False
    return key in _ENV_KEEP or key.startswith(_ENV_KEEP_PREFIXES)


def scrub_command_artifact(run_dir: str) -> None:
    """ansible-runner records the whole environment in ``<run>/command``; keep only what explains the run
    (PATH, ANSIBLE_*, ...) and whose name is not secret by the collection's one rule
    (``_secrets.is_secret_name``), and record every other variable by name only, so that no token lands
    on disk."""
    path = os.path.join(run_dir, "command")
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return
    env = doc.get("env") if isinstance(doc, dict) else None
    if not isinstance(env, dict):
        return
    secrets_rule = collection_secrets()
    if secrets_rule is None:
        # The one place dspark works without the collection's rule (it was not found where ansible-playbook
        # looks for it, see collection_secrets): rather than a second rule of its own, it records no
        # variable by value at all.
        doc["env"] = {key: NOT_RECORDED for key in env}
    else:
        doc["env"] = {key: (value if _env_recordable(key, secrets_rule.is_secret_name) else NOT_RECORDED)
                      for key, value in env.items()}
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, ensure_ascii=False)
    os.replace(tmp, path)


def _child_pids(parent: int) -> list[int]:
    """Direct children of ``parent`` (Linux /proc); during a run that is ansible-runner's ansible-playbook."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    pids = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 1 and fields[1] == str(parent):
            pids.append(int(entry))
    return pids


class _Cancel:
    """Ctrl-C (SIGINT), SIGTERM, SIGHUP (a dropped SSH session) or SIGQUIT cancels the run through
    ansible-runner's ``cancel_callback``.

    ansible-runner cancels with SIGKILL to ansible-playbook's process group, which misses the workers
    (ansible-core runs each in its own session) and the modules they started. So the first poll after the
    signal forwards SIGINT, or SIGTERM for the others (ansible-playbook handles only these two: SIGHUP or
    SIGQUIT would kill it and leave its workers running), to ansible-playbook, which stops its workers and
    exits; the run is canceled for good (SIGKILL) when it is still alive ``grace`` seconds later, or at a
    second signal. A second SIGHUP is no second signal: a hang-up reaches dspark from the terminal and from
    the shell alike. The first signal names the exit code (128 + its number).
    """

    def __init__(self, grace: float = GRACE_SECONDS):
        self.grace = grace
        self.signum: int | None = None
        self.count = 0
        self._forwarded_at: float | None = None
        self._old: dict = {}

    def _handle(self, signum, _frame):
        if self.signum is None:
            self.signum = signum
        elif signum == signal.SIGHUP:
            return
        self.count += 1

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum or signal.SIGINT)

    @property
    def interrupted(self) -> bool:
        return self.signum is not None

    def is_set(self) -> bool:
        if self.signum is None:
            return False
        if self.count > 1:
            return True
        if self._forwarded_at is None:
            self._forwarded_at = time.monotonic()
            children = _child_pids(os.getpid())
            forward = signal.SIGINT if self.signum == signal.SIGINT else signal.SIGTERM
            for pid in children:
                try:
                    os.kill(pid, forward)
                except OSError:
                    pass
            return not children
        return time.monotonic() - self._forwarded_at >= self.grace

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in CANCEL_SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


class _SafeStream:
    """stdout or stderr whose loss does not stop dspark: after a dropped SSH session the terminal answers
    every write with EIO (a closed pipe with EPIPE). dspark must still stop the run, remove its private
    files and scrub the run folder, so from the first failed write on, output is dropped."""

    def __init__(self, stream: TextIO):
        self._stream = stream
        self.broken = False

    @classmethod
    def wrap(cls, stream: TextIO) -> "_SafeStream":
        return stream if isinstance(stream, cls) else cls(stream)

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except OSError:
                self.broken = True
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except OSError:
                self.broken = True

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
ERROR_PREFIXES = ("[ERROR]", "ERROR!")
WARNING_PREFIXES = ("[WARNING]",)


def ansible_messages(run_dir: str, prefixes: tuple[str, ...] = ERROR_PREFIXES, limit: int = 5) -> list[str]:
    """Ansible's own messages (``[ERROR]: ...``, ``ERROR! ...``; or others by ``prefixes``) from the run's
    ``stdout`` artifact, colours removed, each on one line of at most 300 characters: what went wrong
    before or outside any task (a --limit that matches nothing, an inventory that does not parse)."""
    try:
        with open(os.path.join(run_dir, "stdout"), encoding="utf-8", errors="replace") as handle:
            lines = [_ANSI.sub("", line).strip() for line in handle]
    except OSError:
        return []
    return [one_line(line) for line in lines if line.startswith(prefixes)][:limit]


def report_render(path: str, run_dir: str, stats: Mapping | None, as_json: bool, out: TextIO, err: TextIO) -> int:
    """Print the render written to ``path`` (JSON or text) on ``out``; 0, or 1 when no rank was rendered."""
    if not (stats or {}).get("processed"):
        print("dspark render: no rank rendered (no host of the inventory and --limit is in dspark_pairs)", file=err)
        for line in ansible_messages(run_dir, ERROR_PREFIXES + WARNING_PREFIXES):
            print(line, file=err)
        return 1
    try:
        doc = read_document(path)
    except ValueError as exc:
        print(f"dspark render: {exc}", file=err)
        return 1
    if as_json:
        out.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(format_document(doc))
    out.flush()
    print(f"render: {path}", file=err)
    return 0


def summary(args: argparse.Namespace, playbook: str, inventory: str | None, code: int, *, runner=None,
            run_dir: str | None = None, stats: Mapping | None = None, mapping: Mapping[str, str] | None = None,
            audit: Mapping | None = None, canceled: bool = False, error: str | None = None,
            pairs: list | None = None) -> dict:
    """The ``--json`` document of a run; it holds no extra-vars value and no password."""
    mapping = mapping or {}
    status = getattr(runner, "status", None)
    rc = getattr(runner, "rc", None)
    return {
        "command": args.command,
        "playbook": playbook,
        "inventory": inventory,
        "limit": args.limit or None,
        "check": bool(args.check),
        "status": status,
        "rc": rc,
        "exit_code": code,
        "run_folder": run_dir,
        "stdout_artifact": os.path.join(run_dir, "stdout") if run_dir else None,
        "hosts": host_counts(stats, mapping),
        "failing_pairs": [] if runner is None else failing_pairs(status, rc, stats, mapping, canceled=canceled,
                                                                 audit=audit),
        "audit": dict(audit) if isinstance(audit, Mapping) else None,
        # per pair: verdict, phase reached and the first failing rank's reason (gb10.dspark.pair_summary)
        "pairs": pairs,
        "error": error,
    }


def run(argv: list[str] | None = None, *, playbook: str | None = None, environ: Mapping[str, str] | None = None,
        cwd: str | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Parse ``argv``, run the command's playbook (or ``playbook`` when given) and return the exit code."""
    import ansible_runner

    environ = os.environ if environ is None else environ
    cwd = os.path.abspath(cwd or os.getcwd())
    out = _SafeStream.wrap(out or sys.stdout)
    err = _SafeStream.wrap(err or sys.stderr)
    args = build_parser().parse_args(argv)
    name = playbook_name(args)
    target = playbook or PLAYBOOKS[name]
    # --json: stdout holds one JSON document; `render` prints the render alone on stdout. Either way
    # progress, the verdict and the audit table go to stderr.
    as_summary = args.command != "render" and args.json
    info = err if (args.command == "render" or as_summary) else out

    def finish(code: int, inventory: str | None = None, **fields) -> int:
        if as_summary:
            doc = summary(args, target, inventory, code, **fields)
            out.write(json.dumps(doc, indent=2, ensure_ascii=False, default=str) + "\n")
            out.flush()
        return code

    inventory = None
    try:
        check_target(args)
        inventory = resolve_inventory(args.inventory, environ, cwd)
        plan = parse_extravars(release_extravars(args), cwd)
        known = known_vars(plan)
        options = ansible_options(args, cwd)
        try:
            keep = keep_runs(args.keep_runs, environ)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise UsageError(f"DSPARK_KEEP_RUNS: expected a count of run folders to keep (0 keeps all): {exc}") \
                from exc
        if args.command == "render" and known.get(RENDER_OUTPUT_VAR) not in (None, "") and not _plain_path(
                known[RENDER_OUTPUT_VAR]):
            raise UsageError(f"-e {RENDER_OUTPUT_VAR}: expected a plain path on the control node")
    except UsageError as exc:
        print(f"dspark: {exc}", file=err)
        return finish(EX_USAGE, inventory, error=str(exc))
    envvars = runner_envvars(environ, cwd)
    if shutil.which("ansible-playbook", path=envvars["PATH"]) is None:
        message = "ansible-playbook is not on PATH (install ansible-core in this Python's environment)"
        print(f"dspark: {message}", file=err)
        return finish(EX_UNAVAILABLE, inventory, error=message)
    try:
        passwords = ask_passwords(password_prompts(args))
    except UsageError as exc:
        print(f"dspark: {exc}", file=err)
        return finish(EX_USAGE, inventory, error=str(exc))

    run_dir = new_run_dir(artifacts_base(args.artifacts, environ, cwd), name)
    # dspark's own variables go last (they win), in their own file; a path the user gave is re-stated
    # as an absolute path, since ansible-playbook runs in the run folder.
    own: dict = {}
    report_dir = None
    if args.command in AUDIT_COMMANDS:
        given = known.get(AUDIT_DIR_VAR)
        if given in (None, ""):
            report_dir = own[AUDIT_DIR_VAR] = os.path.join(run_dir, "audit")
            os.mkdir(report_dir, 0o755)
        elif _plain_path(given):
            report_dir = _abspath(given, cwd)
            if not os.path.isabs(given):
                own[AUDIT_DIR_VAR] = report_dir
    render_path = None
    if args.command == "render":
        given = known.get(RENDER_OUTPUT_VAR)
        if given in (None, ""):
            render_path = own[RENDER_OUTPUT_VAR] = os.path.join(run_dir, RENDER_FILE)
        else:
            render_path = _abspath(given, cwd)
            if not os.path.isabs(given):
                own[RENDER_OUTPUT_VAR] = render_path
        if RENDER_PROFILE_VAR in known:
            print(f"dspark: --profile {args.profile} is rendered (it wins over -e {RENDER_PROFILE_VAR})", file=err)
        own[RENDER_PROFILE_VAR] = args.profile

    print(f"dspark {name}: {target} on {inventory}" + (f" --limit {args.limit}" if args.limit else "")
          + (" --all" if args.all else "") + (" --check" if args.check else ""), file=info)
    print(f"run folder: {run_dir}", file=info, flush=True)
    envvars["DSPARK_PAIR_SUMMARY_FILE"] = os.path.join(run_dir, PAIRS_FILE)
    mapping = load_pair_map(inventory, {**environ, **envvars}, cwd, err)
    progress_texts = collection_progress()
    if progress_texts is None:
        print("dspark: warning: the collection's progress callback (gb10.dspark.progress) could not be loaded; "
              "the pairs' start-up progress is not shown", file=err)

    # -e items that may hold secrets (dspark_api_key) and dspark's own variables go to ansible-playbook
    # through private files outside the run folder, removed after the run: never into the run folder or argv.
    # The signal handlers go in first and come out last: no signal kills dspark while the files exist.
    with _Cancel() as cancel, tempfile.TemporaryDirectory(prefix="dspark-") as private:
        cmdline = options + extravars_argv(plan, private)
        own_file = None
        if own:
            own_file = os.path.join(private, DSPARK_VARS_FILE)
            _write_private_json(own_file, own)
        try:
            runner = ansible_runner.run(
                private_data_dir=run_dir,
                artifact_dir=os.path.dirname(run_dir),  # artifacts land in the run folder itself
                ident=os.path.basename(run_dir),
                playbook=target,
                inventory=inventory,
                limit=args.limit or None,
                extravars=own_file,  # ansible-runner puts it after the cmdline: dspark's values win
                envvars=envvars,
                cmdline=shlex.join(cmdline) if cmdline else None,  # ansible-runner shlex-splits it back
                passwords=passwords,
                verbosity=args.verbose or None,
                suppress_env_files=True,
                quiet=True,
                event_handler=Progress(mapping, info, texts=progress_texts),
                cancel_callback=cancel.is_set,
            )
        except ansible_runner.AnsibleRunnerException as exc:
            print(f"dspark: ansible-runner could not run {target}: {exc}", file=err)
            print(f"run folder: {run_dir}", file=info, flush=True)
            return finish(1, inventory, run_dir=run_dir, mapping=mapping,
                          error=f"ansible-runner could not run {target}: {exc}")
        finally:
            scrub_command_artifact(run_dir)
    canceled = bool(runner.canceled or cancel.interrupted)
    stats = None if canceled else runner.stats
    print(f"ansible-runner: {runner.status} (rc {runner.rc})", file=info)
    audit = report_audit(report_dir, info if as_summary else out) if report_dir and not canceled else None
    code, line = decide_exit(runner.status, runner.rc, stats, mapping, canceled=canceled, audit=audit)
    if canceled:
        print("dspark: interrupted; the run was stopped", file=info)
        code = cancel.exit_code
    if line:
        print(line, file=info)
    if code != 0 and not canceled and (render_path is not None or not failing_hosts(stats)):
        for error in ansible_messages(run_dir):  # what failed outside any task (vault, inventory, --limit)
            print(error, file=info)
    print(f"ansible output: {os.path.join(run_dir, 'stdout')}", file=info)
    print(f"run folder: {run_dir}", file=info, flush=True)
    removed = rotate_runs(os.path.dirname(run_dir), keep, run_dir)
    if removed:
        print(f"removed {len(removed)} older run folder(s) beyond the newest {keep} (--keep-runs)", file=info)
    if render_path is not None and code == 0:
        code = report_render(render_path, run_dir, stats, args.json, out, err)
    pairs = None if canceled else read_pairs(run_dir, info)
    return finish(code, inventory, runner=runner, run_dir=run_dir, stats=stats, mapping=mapping, audit=audit, pairs=pairs,
                  canceled=canceled)


def main(argv: list[str] | None = None) -> int:
    out, err = _SafeStream(sys.stdout), _SafeStream(sys.stderr)
    try:
        code = run(argv, out=out, err=err)
    except KeyboardInterrupt:
        print("dspark: interrupted", file=err)
        code = EXIT_SIGINT
    # A terminal that went away would fail Python's last flush of it and turn the exit code into 120.
    if out.broken:
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (open until the process ends)
    if err.broken:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    return code


if __name__ == "__main__":
    sys.exit(main())

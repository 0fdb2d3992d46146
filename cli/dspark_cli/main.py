"""`dspark`: run the gb10.dspark playbooks through ansible-runner, with live progress per GB10 pair.

    dspark <command> [--inventory PATH] [--limit PATTERN] [-e KEY=VALUE|@FILE ...] [--check]
                     [--artifacts DIR] [-v]
    dspark render --profile NAME [--json] [the options above]

Every run gets its own folder ``<artifacts>/<command>-<UTC time>-<random>`` holding ansible-runner's
artifacts (``stdout``, ``job_events/``, ``rc``, ``status``) and, for ``audit``, the report; for
``render``, the render itself (``render.json``), which alone goes to stdout: progress goes to stderr.
"""
from __future__ import annotations

import argparse
import configparser
import datetime
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Mapping, TextIO

import yaml

from . import __version__
from .progress import Progress, decide_exit, one_line, pair_map
from .render import format_document, read_document

EX_USAGE = 64
EX_UNAVAILABLE = 69
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
INVENTORY_TIMEOUT = 300
GRACE_SECONDS = 15.0
AUDIT_DIR_VAR = "dspark_audit_report_dir"
RENDER_OUTPUT_VAR = "dspark_render_output"
RENDER_PROFILE_VAR = "dspark_profile_name"
RENDER_FILE = "render.json"

PLAYBOOKS = {
    "preflight": "gb10.dspark.preflight",
    "provision": "gb10.dspark.provision",
    "rollback": "gb10.dspark.rollback",
    "rollforward": "gb10.dspark.rollforward",
    "audit": "gb10.dspark.audit",
    "guard": "gb10.dspark.guard",
    "niah": "gb10.dspark.niah",
    "evidence": "gb10.dspark.evidence",
    "teardown": "gb10.dspark.teardown",
    "render": "gb10.dspark.render",
}

HELP = {
    "preflight": "check every identity of pairs before a change (changes nothing)",
    "provision": "provision pairs: identity preflight, image, profile, engine, runtime gate",
    "rollback": "roll pairs back to the breakable A/B profile (--forward: roll forward again)",
    "audit": "audit the fleet and print the drift table (exit 2 when a pair is not OK)",
    "guard": "run the 64x128 serving guard",
    "niah": "run the max-context needle-in-a-haystack check",
    "evidence": "collect the evidence pack",
    "teardown": "stop the engines and remove what provision made",
    "render": "print each rank's vllm serve argv, environment and container options (contacts no host)",
}

# YAML 1.1 reads these as booleans; `-e` follows YAML 1.2 and keeps them as strings.
_YAML11_BOOLS = frozenset({"yes", "no", "on", "off", "y", "n"})


class UsageError(Exception):
    """A command-line or environment problem: exit 64."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 64 (EX_USAGE), not 2: 2 means failed hosts
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    opts = common.add_argument_group("run options")
    opts.add_argument("-i", "--inventory", metavar="PATH",
                      help="inventory file or folder (default: $DSPARK_INVENTORY)")
    opts.add_argument("-l", "--limit", metavar="PATTERN", help="limit the run to these hosts or groups")
    opts.add_argument("-e", "--extra-vars", dest="extra_vars", action="append", default=[],
                      metavar="KEY=VALUE|@FILE",
                      help="extra variable (value read as YAML: true is a boolean) or a YAML file of them; repeatable")
    opts.add_argument("--check", action="store_true", help="run ansible in check mode (changes nothing)")
    opts.add_argument("--artifacts", metavar="DIR",
                      help="where run folders go (default: $DSPARK_ARTIFACTS or ./artifacts/runs)")
    opts.add_argument("-v", "--verbose", action="count", default=0,
                      help="ansible verbosity in the run's stdout artifact (-vvv for more)")

    parser = _Parser(prog="dspark", description="Run the gb10.dspark playbooks with live progress per GB10 pair.",
                     epilog="Exit codes: 0 success, 2 failed hosts or audit drift (else the playbook's rc), "
                            "64 usage, 130 interrupted.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="<command>", required=True, parser_class=_Parser)
    for name, text in HELP.items():
        cmd = sub.add_parser(name, parents=[common], help=text, description=f"{text} ({PLAYBOOKS[name]})")
        if name == "rollback":
            cmd.add_argument("--forward", action="store_true",
                             help=f"roll forward instead ({PLAYBOOKS['rollforward']})")
        if name == "render":
            cmd.add_argument("--profile", required=True, metavar="NAME",
                             help="the serving profile to render: production, long-1m or breakable-ab "
                                  "(the playbook checks the name)")
            cmd.add_argument("--json", action="store_true",
                             help="print the render as JSON (a list of ranks) instead of text")
    return parser


def playbook_name(args: argparse.Namespace) -> str:
    """The short name of what runs: the command, or ``rollforward`` for ``rollback --forward``."""
    if args.command == "rollback" and getattr(args, "forward", False):
        return "rollforward"
    return args.command


def playbook_for(args: argparse.Namespace) -> str:
    return PLAYBOOKS[playbook_name(args)]


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


def _yaml_value(text: str) -> object:
    if text == "" or text.strip().lower() in _YAML11_BOOLS:
        return text
    try:
        value = yaml.safe_load(text)
        json.dumps(value)  # dates and other YAML-only types stay strings
    except (yaml.YAMLError, TypeError, ValueError):
        return text
    return value


def _yaml_file(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise UsageError(f"-e @{path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise UsageError(f"-e @{path}: not valid YAML ({exc.__class__.__name__})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"-e @{path}: expected a YAML mapping of variables (vault-encrypted files are not read)")
    try:
        json.dumps(data)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"-e @{path}: holds values that are not plain YAML data ({exc})") from exc
    return data


def parse_extravars(items: list[str], cwd: str) -> dict:
    """``-e`` arguments merged in order: ``KEY=VALUE`` (value read as YAML), ``@FILE`` or an inline mapping."""
    merged: dict = {}
    for item in items:
        if item.startswith("@"):
            merged.update(_yaml_file(_abspath(item[1:], cwd)))
        elif item.lstrip().startswith("{"):
            value = _yaml_value(item)
            if not isinstance(value, dict):
                raise UsageError(f"-e {item[:40]}: not a valid inline mapping")
            merged.update(value)
        else:
            key, sep, raw = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise UsageError(f"-e {item[:40]}: expected KEY=VALUE or @FILE")
            merged[key] = _yaml_value(raw)
    return merged


def new_run_dir(base: str, name: str, now: datetime.datetime | None = None, token: str | None = None) -> str:
    """Create ``<base>/<name>-<yyyymmddTHHMMSSZ>-<token>`` (mode 0700) and return it."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stamp = now.astimezone(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = os.path.join(base, f"{name}-{stamp}-{token or secrets.token_hex(3)}")
    os.makedirs(base, exist_ok=True)
    os.mkdir(path, 0o700)
    return path


def _config_bool(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")


def _host_key_checking(config_path: str | None) -> str:
    """What the Ansible configuration says about host key checking (ansible's default: True)."""
    candidates = [config_path] if config_path else [os.path.expanduser("~/.ansible.cfg"), "/etc/ansible/ansible.cfg"]
    for path in candidates:
        if path and os.path.isfile(path):
            parser = configparser.ConfigParser(interpolation=None, strict=False)
            try:
                parser.read(path, encoding="utf-8")
            except (configparser.Error, OSError, UnicodeDecodeError):
                break
            if parser.has_option("defaults", "host_key_checking"):
                return str(_config_bool(parser.get("defaults", "host_key_checking")))
            break
    return "True"


def runner_envvars(environ: Mapping[str, str], cwd: str, executable: str | None = None) -> dict[str, str]:
    """Environment variables handed to ansible-runner on top of the inherited environment.

    - PATH starts with the folder of this Python (the virtualenv's bin), so ``ansible-playbook`` is found;
    - ANSIBLE_CONFIG points at ``./ansible.cfg`` of the invoking folder (the runner runs elsewhere),
      or at the absolute form of an ANSIBLE_CONFIG already set;
    - ANSIBLE_HOST_KEY_CHECKING keeps the configured value (ansible-runner would otherwise turn it off).
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
    return envvars


def load_pair_map(inventory: str, env: Mapping[str, str], cwd: str, err: TextIO) -> dict[str, str]:
    """Host -> pair from ``ansible-inventory --list``; on any trouble warn and show hosts by name."""
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
        return pair_map(json.loads(proc.stdout))
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
_ENV_SECRETISH = ("PASS", "TOKEN", "SECRET", "CRED", "API_KEY", "APIKEY", "AUTH")
NOT_RECORDED = "(not recorded)"


def _env_recordable(key: str) -> bool:
    upper = key.upper()
    if any(word in upper for word in _ENV_SECRETISH):
        return False
    return key in _ENV_KEEP or key.startswith(_ENV_KEEP_PREFIXES)


def scrub_command_artifact(run_dir: str) -> None:
    """ansible-runner records the whole environment in ``<run>/command``; keep only what explains the run
    (PATH, ANSIBLE_*, ...) and record every other variable by name only, so that no token lands on disk."""
    path = os.path.join(run_dir, "command")
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, ValueError):
        return
    env = doc.get("env") if isinstance(doc, dict) else None
    if not isinstance(env, dict):
        return
    doc["env"] = {key: (value if _env_recordable(key) else NOT_RECORDED) for key, value in env.items()}
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(doc, handle, ensure_ascii=False)
    os.replace(tmp, path)


def _write_private_json(path: str, data: object) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle)


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
    """Ctrl-C (SIGINT) or SIGTERM cancels the run through ansible-runner's ``cancel_callback``.

    ansible-runner cancels with SIGKILL to ansible-playbook's process group, which misses the workers
    (ansible-core runs each in its own session) and the modules they started. So the first poll after the
    signal forwards it to ansible-playbook, which stops its workers and exits; the run is canceled for
    good (SIGKILL) when it is still alive ``grace`` seconds later, or at a second signal.
    """

    def __init__(self, grace: float = GRACE_SECONDS):
        self.grace = grace
        self.signum: int | None = None
        self.count = 0
        self._forwarded_at: float | None = None
        self._old: dict = {}

    def _handle(self, signum, _frame):
        self.signum = signum
        self.count += 1

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
            for pid in children:
                try:
                    os.kill(pid, self.signum)
                except OSError:
                    pass
            return not children
        return time.monotonic() - self._forwarded_at >= self.grace

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


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


def run(argv: list[str] | None = None, *, playbook: str | None = None, environ: Mapping[str, str] | None = None,
        cwd: str | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Parse ``argv``, run the command's playbook (or ``playbook`` when given) and return the exit code."""
    import ansible_runner

    environ = os.environ if environ is None else environ
    cwd = os.path.abspath(cwd or os.getcwd())
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    name = playbook_name(args)
    # `render` prints the render alone on stdout; its progress and verdict go to stderr.
    info = err if args.command == "render" else out
    try:
        inventory = resolve_inventory(args.inventory, environ, cwd)
        extravars = parse_extravars(args.extra_vars, cwd)
        given_render = extravars.get(RENDER_OUTPUT_VAR)
        if args.command == "render" and given_render not in (None, "") and (
                not isinstance(given_render, str) or "{{" in given_render):
            raise UsageError(f"-e {RENDER_OUTPUT_VAR}: expected a plain path on the control node")
    except UsageError as exc:
        print(f"dspark: {exc}", file=err)
        return EX_USAGE
    envvars = runner_envvars(environ, cwd)
    if shutil.which("ansible-playbook", path=envvars["PATH"]) is None:
        print("dspark: ansible-playbook is not on PATH (install ansible-core in this Python's environment)", file=err)
        return EX_UNAVAILABLE

    run_dir = new_run_dir(artifacts_base(args.artifacts, environ, cwd), name)
    report_dir = None
    if args.command == "audit":
        given = extravars.get(AUDIT_DIR_VAR)
        if given in (None, ""):
            report_dir = os.path.join(run_dir, "audit")
            os.mkdir(report_dir, 0o755)
            extravars[AUDIT_DIR_VAR] = report_dir
        elif isinstance(given, str) and "{{" not in given:
            report_dir = extravars[AUDIT_DIR_VAR] = _abspath(given, cwd)
    render_path = None
    if args.command == "render":
        extravars[RENDER_PROFILE_VAR] = args.profile
        render_path = (_abspath(given_render, cwd) if given_render not in (None, "")
                       else os.path.join(run_dir, RENDER_FILE))
        extravars[RENDER_OUTPUT_VAR] = render_path

    target = playbook or PLAYBOOKS[name]
    print(f"dspark {name}: {target} on {inventory}" + (f" --limit {args.limit}" if args.limit else "")
          + (" --check" if args.check else ""), file=info)
    print(f"run folder: {run_dir}", file=info, flush=True)
    mapping = load_pair_map(inventory, {**environ, **envvars}, cwd, err)

    # Extra vars may hold secrets (dspark_api_key): they go to ansible-playbook through a private file
    # outside the run folder that is removed after the run, never into the run folder or argv.
    with tempfile.TemporaryDirectory(prefix="dspark-") as private, _Cancel() as cancel:
        vars_file = None
        if extravars:
            vars_file = os.path.join(private, "extravars.json")
            _write_private_json(vars_file, extravars)
        try:
            runner = ansible_runner.run(
                private_data_dir=run_dir,
                artifact_dir=os.path.dirname(run_dir),  # artifacts land in the run folder itself
                ident=os.path.basename(run_dir),
                playbook=target,
                inventory=inventory,
                limit=args.limit or None,
                extravars=vars_file,
                envvars=envvars,
                cmdline="--check" if args.check else None,
                verbosity=args.verbose or None,
                suppress_env_files=True,
                quiet=True,
                event_handler=Progress(mapping, info),
                cancel_callback=cancel.is_set,
            )
        except ansible_runner.AnsibleRunnerException as exc:
            print(f"dspark: ansible-runner could not run {target}: {exc}", file=err)
            print(f"run folder: {run_dir}", file=info, flush=True)
            return 1
        finally:
            scrub_command_artifact(run_dir)
    canceled = bool(runner.canceled or cancel.interrupted)
    stats = None if canceled else runner.stats
    print(f"ansible-runner: {runner.status} (rc {runner.rc})", file=info)
    audit = report_audit(report_dir, out) if report_dir and not canceled else None
    code, line = decide_exit(runner.status, runner.rc, stats, mapping, canceled=canceled, audit=audit)
    if canceled:
        print("dspark: interrupted; the run was stopped", file=info)
        code = EXIT_SIGTERM if cancel.signum == signal.SIGTERM else EXIT_SIGINT
    if line:
        print(line, file=info)
    if render_path is not None and code != 0 and not canceled:
        for error in ansible_messages(run_dir):
            print(error, file=info)
    print(f"ansible output: {os.path.join(run_dir, 'stdout')}", file=info)
    print(f"run folder: {run_dir}", file=info, flush=True)
    if render_path is not None and code == 0:
        code = report_render(render_path, run_dir, stats, args.json, out, err)
    return code


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except KeyboardInterrupt:
        print("dspark: interrupted", file=sys.stderr)
        return EXIT_SIGINT


if __name__ == "__main__":
    sys.exit(main())

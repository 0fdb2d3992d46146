"""A stand-in r0b0bench checkout for the external lane's tests.

:func:`make_checkout` writes a folder holding a package ``r0b0bench`` whose ``cli`` module has the
command line of the real client (r0b0bench 1.0.0rc2): ``--version`` prints ``r0b0bench <version>``;
``run --profile --base-url --model --output [--tokenizer] [--only] [--run-id]`` writes
``<output>/<run id>/report.json`` (schema 2: ``r0b0bench_version``, ``lanes`` of ``lane_id``, ``status``,
``infra_errors``, ``summary``). The systems lane runs ``<python> -m r0b0bench.cli`` with the checkout as
its working directory, so the package is found there without any PYTHONPATH (the child's environment
is minimal). Only the standard library is used.

Behaviour comes from ``fake.json`` in the checkout (what :func:`make_checkout` was given):

* ``version``: what ``--version`` reports; null makes ``--version`` an unknown option (exit 2), like a
  client too old to have one;
* ``lanes``: per lane name, the entry to report (``status``, ``backend``, ``summary``, ``infra_errors``);
  a lane of ``--only`` missing from it is left out of the report, as the real client leaves out lanes
  its profile does not have;
* ``report_backend``: a report-level ``backend``, when given;
* ``write_report``: false to exit 3 without a report.

Each ``run`` also writes ``seen.json`` beside the report: the arguments after the module name, the
working directory and the environment, with ``OPENAI_API_KEY`` replaced by its sha256 so the key is
never written out by the tests.
"""
from __future__ import annotations

import json
from pathlib import Path

SYSTEMS_LANES = ("canary", "bfcl_mt", "bfcl_ast", "latency", "concurrency", "throughput", "niah")

CLI = r'''
import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

CONFIG = json.loads((Path(__file__).resolve().parents[1] / "fake.json").read_text())


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="r0b0bench")
    if CONFIG["version"] is not None:
        parser.add_argument("--version", action="version", version="r0b0bench " + CONFIG["version"])
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run")
    run.add_argument("--profile", required=True, choices=["core", "core-subset", "systems", "hard-subset"])
    run.add_argument("--base-url", required=True)
    run.add_argument("--model", required=True)
    run.add_argument("--output", required=True)
    run.add_argument("--tokenizer", default="")
    run.add_argument("--only", default="")
    run.add_argument("--run-id", default="fake-run")
    args = parser.parse_args(argv)
    run_dir = Path(args.output) / args.run_id
    env = dict(os.environ)
    if "OPENAI_API_KEY" in env:
        env["OPENAI_API_KEY"] = "sha256:" + hashlib.sha256(env["OPENAI_API_KEY"].encode()).hexdigest()
    if not CONFIG.get("write_report", True):
        print("Traceback: the fake client was told to fail", file=sys.stderr)
        return 3
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "seen.json").write_text(json.dumps({"argv": argv, "cwd": os.getcwd(), "env": env}))
    lanes = []
    for name in [x for x in args.only.split(",") if x]:
        entry = CONFIG["lanes"].get(name)
        if entry is not None:
            lanes.append(dict({"lane_id": name, "status": "PASS", "infra_errors": 0, "summary": {}}, **entry))
    report = {"schema_version": 2, "r0b0bench_version": CONFIG["version"], "run_id": args.run_id,
              "profile": args.profile, "base_url": args.base_url, "model": args.model, "lanes": lanes}
    if CONFIG.get("report_backend"):
        report["backend"] = CONFIG["report_backend"]
    (run_dir / "report.json").write_text(json.dumps(report))
    print("report: " + str(run_dir / "report.json"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
'''


def make_checkout(root: Path, version: str | None = "1.0.0rc2", lanes: dict | None = None,
                  report_backend: str | None = None, write_report: bool = True) -> Path:
    """A fake r0b0bench checkout under ``root`` (created); returns its folder."""
    checkout = Path(root)
    package = checkout / "r0b0bench"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (package / "cli.py").write_text(CLI)
    if lanes is None:
        lanes = {name: {"status": "PASS", "summary": {"backend": "openai_portable"}} for name in SYSTEMS_LANES}
    (checkout / "fake.json").write_text(json.dumps({"version": version, "lanes": lanes,
                                                    "report_backend": report_backend,
                                                    "write_report": write_report}))
    return checkout


def seen(output_root: Path) -> dict:
    """What the fake client's only run under ``output_root`` was given (``seen.json``)."""
    found = sorted(Path(output_root).glob("*/seen.json"))
    assert len(found) == 1, found
    return json.loads(found[0].read_text())

"""Benchmark: gb10.dspark.image_identity loads a multi-GB archive in bounded memory, once.

On the simulator (one pair), it writes a synthetic docker-archive of BENCH_ARCHIVE_GIB GiB
(default 4) where the worker can read it, then runs the module on the worker through Ansible over
SSH, exactly as a role does, twice:

1. the engine lacks the image: the module reads the archive's ID, streams it into the engine,
   tags it and asserts the tag;
2. the engine holds it: the module must load nothing.

While each run lasts, the peak resident memory (VmHWM) of the module's process on the rank is
sampled from /proc (the ranks share the host's PID namespace). Targets, checked here and not in
timed tests: peak RSS under BENCH_MAX_RSS_MIB (default 128) for a load of any size; the second run
reports loaded=false and changed=false. Results go to artifacts/bench/image-load-memory.json.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import yaml

import _common as common  # bench/_common.py (this script's folder is on sys.path)
from dspark_sim.image import _sha256_file  # sim/ is on sys.path (bench/_common.py)
from tests.support import synthetic_archive

GIB = common.GIB
WORK = common.WORK
INVENTORY = common.INVENTORY
OUT = common.ARTIFACTS / "image-load-memory.json"
WORKER = "sim01-worker"
MARK = "AnsiballZ_image_identity"


def module_run(args: dict) -> dict:
    # Without pipelining the module runs as `python3 .../AnsiballZ_image_identity.py`, so its
    # process can be told apart from other Python processes on the rank.
    res, hosts = common.adhoc(WORKER, "gb10.dspark.image_identity", args, env={"ANSIBLE_PIPELINING": "0"})
    if WORKER not in hosts:
        raise SystemExit(f"no result from image_identity:\n{res.stdout}\n{res.stderr}")
    result = hosts[WORKER]["result"]
    if res.returncode != 0:
        raise SystemExit(f"image_identity failed: {result.get('msg')}")
    return result


def main() -> int:
    gib = float(os.environ.get("BENCH_ARCHIVE_GIB", "4"))
    max_rss_mib = float(os.environ.get("BENCH_MAX_RSS_MIB", "128"))
    pin = yaml.safe_load((INVENTORY / "group_vars" / "all" / "pin.yml").read_text())["dspark_pin"]
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    t0 = time.monotonic()
    made = synthetic_archive.write(WORK / "bench.tar", tag="dspark-bench:load", layer_bytes=int(gib * GIB))
    size = (WORK / "bench.tar").stat().st_size
    print(f"[bench] wrote a {size / GIB:.2f} GiB archive in {time.monotonic() - t0:.1f} s")
    # image_identity refuses to load an archive the pin has no sha256 for.
    pin.update(image_tag=made["tag"], image_id=made["image_id"], image_manifest_digest=None,
               image_archive_sha256=_sha256_file(WORK / "bench.tar"))
    args = {"rank": WORKER, "pin": pin, "path": made["path"], "check_labels": False}
    rows = []
    try:
        for attempt in ("first run (load)", "second run (held)"):
            t = time.monotonic()
            result, peaks = common.peak_rss_while(lambda: module_run(args), MARK)
            peak_kib = max(peaks.values(), default=0)
            elapsed = time.monotonic() - t
            row = {"run": attempt, "elapsed_s": round(elapsed, 2), "peak_rss_mib": round(peak_kib / 1024, 1),
                   "changed": result["changed"], "loaded": result["loaded"], "image_store": result["image_store"]}
            if result["loaded"]:
                row["throughput_mib_s"] = round(size / (1 << 20) / elapsed, 1)
            rows.append(row)
            print(f"[bench] {attempt}: {json.dumps(row)}")
    finally:
        subprocess.run([common.tool("ansible"), "-i", str(INVENTORY), WORKER, "-m",
                        "ansible.builtin.command", "-a", f"docker image rm {made['tag']}"],
                       cwd=common.ROOT, capture_output=True, env=common.ansible_env(), check=False)
        shutil.rmtree(WORK, ignore_errors=True)
    failures = []
    first, second = rows
    if not first["loaded"]:
        failures.append("the first run did not load")
    if first["peak_rss_mib"] == 0:
        failures.append("no sample of the module process was taken; the measurement is void")
    for row in rows:
        if row["peak_rss_mib"] > max_rss_mib:
            failures.append(f"{row['run']}: peak RSS {row['peak_rss_mib']} MiB > {max_rss_mib} MiB")
    if second["loaded"] or second["changed"]:
        failures.append("the second run changed something")
    report = {"archive_bytes": size, "max_rss_mib_target": max_rss_mib, "runs": rows, "failures": failures,
              "verdict": "PASS" if not failures else "FAIL"}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"[bench] {report['verdict']}: {OUT}" + ("".join(f"\n  - {f}" for f in failures)))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())

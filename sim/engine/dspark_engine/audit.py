"""Runtime audit run by the image entrypoint before ``vllm serve`` (and by ``... audit``).

Reads the runtime manifest (``/opt/r0b0tlab/runtime-manifest.json``, or the path in
``DSPARK_RUNTIME_MANIFEST``) as strict JSON and checks ``kv_cache_dtype == nvfp4_ds_mla``,
``speculative_method == dspark`` and ``vllm_version`` == this engine's version.  On success it
prints one JSON line and ``DSPARK_RUNTIME_AUDIT_PASS`` (exit 0); otherwise
``DSPARK_RUNTIME_AUDIT_FAIL: <msg>`` on stderr (exit 1).  A missing manifest is a failure.
"""
import hashlib
import json
import os
import sys

from . import VERSION
from .strict_json import StrictJSONError, loads_object

DEFAULT_MANIFEST = "/opt/r0b0tlab/runtime-manifest.json"
EXPECTED = {"kv_cache_dtype": "nvfp4_ds_mla", "speculative_method": "dspark", "vllm_version": VERSION}


def audit(path):
    """(report dict, list of problems) for the manifest at ``path``."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        return None, [f"runtime manifest {path} cannot be read: {exc.strerror or exc}"]
    try:
        manifest = loads_object(raw)
    except StrictJSONError as exc:
        return None, [f"runtime manifest {path} is not strict JSON: {exc}"]
    problems = [f"{key} is {manifest.get(key)!r}, expected {want!r}"
                for key, want in EXPECTED.items() if manifest.get(key) != want]
    report = {"audit": "dspark-runtime", "status": "FAIL" if problems else "PASS", "manifest": path,
              "manifest_sha256": hashlib.sha256(raw).hexdigest(), "schema_version": manifest.get("schema_version"),
              "engine_version": VERSION, **{key: manifest.get(key) for key in EXPECTED}}
    return report, problems


def main(argv=None):
    path = os.environ.get("DSPARK_RUNTIME_MANIFEST") or DEFAULT_MANIFEST
    report, problems = audit(path)
    if problems:
        print(f"DSPARK_RUNTIME_AUDIT_FAIL: {'; '.join(problems)}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps(report, sort_keys=True), flush=True)
    print("DSPARK_RUNTIME_AUDIT_PASS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

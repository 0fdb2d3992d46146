"""Make ``ansible_collections.gb10.dspark`` importable from the checkout for plugin unit tests."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
COLLECTIONS = REPO / "collections"
FIXTURES = REPO / "tests" / "fixtures"

if not (COLLECTIONS / "ansible_collections" / "gb10" / "dspark").exists():
    raise RuntimeError("collections/ansible_collections/gb10/dspark is missing: run `make deps`")
for _path in (COLLECTIONS, REPO):  # the collection, and tests.support for shared test data writers
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

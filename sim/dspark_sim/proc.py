"""Running commands as argv lists (never shell strings) with readable failures."""
from __future__ import annotations

import subprocess
import sys
from typing import Sequence


class SimError(RuntimeError):
    """A simulator step failed; the message says which and why."""


def run(argv: Sequence[str], *, check: bool = True, capture: bool = True, timeout: float = 120,
        input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        res = subprocess.run(list(argv), check=False, text=True, timeout=timeout, input=input_text,
                             stdout=subprocess.PIPE if capture else None,
                             stderr=subprocess.PIPE if capture else None)
    except FileNotFoundError as exc:
        raise SimError(f"command not found: {argv[0]} (run `make deps`)") from exc
    except subprocess.TimeoutExpired as exc:
        raise SimError(f"timed out after {timeout}s: {' '.join(argv)}") from exc
    if check and res.returncode != 0:
        err = (res.stderr or res.stdout or "").strip()
        raise SimError(f"`{' '.join(argv)}` exited {res.returncode}: {err}")
    return res


def ok(argv: Sequence[str], timeout: float = 60) -> bool:
    return run(argv, check=False, timeout=timeout).returncode == 0


def say(msg: str) -> None:
    print(f"[sim] {msg}", file=sys.stderr, flush=True)

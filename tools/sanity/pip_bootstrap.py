"""Stand-in for the pip bootstrap script ansible-test downloads (``get_pip_<version>.py``).

ansible-test creates its virtual environments without pip, then runs a bootstrap script it
fetches from its own file server to put a pinned pip in. Where that server is out of reach
(but the Python package index is not), run_sanity.py copies this file to the place ansible-test
caches the script. It does what the original does, with the pip that ships inside Python:

    python pip_bootstrap.py [pip options] pip==X.Y [--no-setuptools] [--no-wheel]

1. ``python -m ensurepip`` installs the pip wheel bundled with this Python into the environment
   (in a child process: ensurepip points the pip configuration of its own process at /dev/null);
2. that pip installs the requested packages (the pinned pip), with the user's pip configuration;
3. with ``--no-setuptools`` / ``--no-wheel``, those are removed again if ensurepip installed them.
"""
from __future__ import annotations

import importlib.metadata
import subprocess
import sys


def _installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def main(argv: list[str]) -> int:
    drop = {"--no-setuptools": "setuptools", "--no-wheel": "wheel"}
    pip_args = [a for a in argv if a not in drop]

    subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *pip_args], check=True)
    present = [pkg for flag, pkg in drop.items() if flag in argv and _installed(pkg)]
    if present:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "--yes", "--quiet", "--disable-pip-version-check",
                        *present], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

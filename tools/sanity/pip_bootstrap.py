"""Stand-in for the pip bootstrap script ansible-test downloads (``get_pip_<version>.py``).

ansible-test creates its virtual environments without pip, then runs a bootstrap script it
fetches from its own file server to put a pinned pip in. Where that server is out of reach
(but the Python package index is not), run_sanity.py copies this file to the place ansible-test
caches the script. It does what the original does, with the pip that ships inside Python:

    python pip_bootstrap.py [pip options] pip==X.Y [--no-setuptools] [--no-wheel]

1. ``ensurepip`` installs the pip wheel bundled with this Python into the running environment;
2. that pip installs the requested packages (the pinned pip);
3. with ``--no-setuptools`` / ``--no-wheel``, those are removed again if ensurepip left them.
"""
from __future__ import annotations

import ensurepip
import os
import subprocess
import sys


def main(argv: list[str]) -> int:
    drop = {"--no-setuptools": "setuptools", "--no-wheel": "wheel"}
    unwanted = [pkg for flag, pkg in drop.items() if flag in argv]
    pip_args = [a for a in argv if a not in drop]

    # ensurepip clears the PIP_* variables of this process and points PIP_CONFIG_FILE at /dev/null:
    # the pip that follows gets the environment (and so the pip configuration) as it was.
    env = dict(os.environ)
    ensurepip.bootstrap(upgrade=False, default_pip=True)
    subprocess.run([sys.executable, "-m", "pip", "install", *pip_args], check=True, env=env)
    if unwanted:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "--yes", "--disable-pip-version-check", *unwanted],
                       check=True, stdout=subprocess.DEVNULL, env=env)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

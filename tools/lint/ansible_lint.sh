#!/usr/bin/env bash
# ansible-lint over the playbooks, roles and molecule scenario of gb10.dspark, as CI runs it:
# from the repository root, with the repository's ansible.cfg (collections from ./collections),
# the production profile and the settings of .ansible-lint (offline: Galaxy is never asked and
# requirements.yml is not installed). Any finding, warnings included (--strict), fails.
#   bash tools/lint/ansible_lint.sh            # the whole tree, as .ansible-lint selects it
#   bash tools/lint/ansible_lint.sh roles/gate # or only some paths
# The virtualenv is $VENV (default ./.venv, as in the Makefile); without one, ansible-lint is
# taken from PATH.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

venv="${VENV:-$root/.venv}"
if [[ -x "$venv/bin/ansible-lint" ]]; then
    export PATH="$venv/bin:$PATH"
fi
if ! command -v ansible-lint >/dev/null; then
    echo "ansible-lint: not installed (make deps installs requirements.txt into $venv)" >&2
    exit 2
fi

export ANSIBLE_CONFIG="$root/ansible.cfg"

exec ansible-lint --config-file "$root/.ansible-lint" --profile production --offline --strict "$@"

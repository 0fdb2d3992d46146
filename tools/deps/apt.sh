#!/usr/bin/env bash
# Install the Debian packages gb10.dspark and its pair simulator need; only the missing ones.
set -euo pipefail
packages=(
  docker.io          # one dockerd per simulated rank
  openssh-server     # one sshd per simulated rank
  openssh-client     # Ansible's transport
  sudo               # the ranks' become: the control node logs in as an unprivileged user
  mmdebstrap         # builds the stand-in image's rootfs from the machine's apt sources
  iproute2           # network namespaces, veths, the simulator bridge
  iptables           # allow the simulator bridge when a host dockerd set FORWARD to DROP
  util-linux         # nsenter, unshare
  python3            # the ranks' Python for Ansible modules, and the base of the control node's virtualenv (Makefile, BASE_PYTHON)
  python3-requests   # community.docker modules on the ranks
  python3-docker     # the docker SDK: the collection's own modules on the ranks (plugins/module_utils/engine/_docker_engine.py)
  python3-venv       # the control node's virtualenv
  procps
  git
  curl
  shellcheck         # actionlint (the CI workflow's run: scripts) and ansible-test sanity (shell scripts)
  chromium           # a real headless browser opens the fleet audit's HTML report in the tests
  chromium-driver    # ...driven through selenium, without any browser download
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "[deps] apt: all ${#packages[@]} packages present"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "[deps] apt: missing ${missing[*]} and not root; install them first" >&2
  exit 1
fi
echo "[deps] apt: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's docker.io enables units for systemd; the simulator starts its own dockerds instead.

#!/usr/bin/env bash
# PID 1 of a simulated GB10 rank, started by the simulator as
#   nsenter --net=/var/run/netns/NS unshare --mount --uts --propagation private init.sh RANK_DIR MGMT_IP HOSTNAME
# It builds the rank's private view of the filesystem, starts the rank's own dockerd,
# then becomes the rank's sshd. Nothing here touches the host's mount table.
set -euo pipefail
rank_dir=$1
mgmt_ip=$2
hostname "$3"

# Private /run: the rank's docker socket, pid files and sshd privsep dir live here.
mount -t tmpfs -o mode=0755 dsim-run /run
mkdir -p /run/sshd /run/docker
# Per-rank state bound over the system paths (mount points are created by the simulator).
while read -r src target; do
  mount --bind "$src" "$target"
done <"$rank_dir/mounts"

# The rank's own /etc/hosts names it, as a real host's does (sudo resolves its hostname).
{ cat /etc/hosts; printf '127.0.1.1\t%s\n' "$3"; } >"$rank_dir/run/hosts"
mount --bind "$rank_dir/run/hosts" /etc/hosts

echo $$ >"$rank_dir/run/init.pid"
dockerd --config-file /etc/docker/daemon.json >>"$rank_dir/log/dockerd.log" 2>&1 &
echo $! >"$rank_dir/run/dockerd.pid"

for _ in $(seq 1 120); do
  if docker -H unix:///run/docker.sock version >/dev/null 2>&1; then break; fi
  sleep 0.5
done

# Keys: a user's own ~/.ssh/authorized_keys, as on a real rank (the operator guide's ops user, made by
# test_85 the guide's way), then the rank's file with the control node's key for the simulator's operator.
exec /usr/sbin/sshd -D -e \
  -o ListenAddress="$mgmt_ip" \
  -o HostKey="$rank_dir/ssh/ssh_host_ed25519_key" \
  -o AuthorizedKeysFile=".ssh/authorized_keys $rank_dir/ssh/authorized_keys" \
  -o PermitRootLogin=no \
  -o PasswordAuthentication=no \
  -o KbdInteractiveAuthentication=no \
  -o UsePAM=no \
  -o StrictModes=no \
  -o MaxStartups=100:30:200 \
  -o MaxSessions=50 \
  -o PidFile=/run/sshd.pid \
  >>"$rank_dir/log/sshd.log" 2>&1

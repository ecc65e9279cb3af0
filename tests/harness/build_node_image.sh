#!/usr/bin/env bash
# Builds the simulated GDS node image (Debian 12) with debootstrap and imports it into podman.
# TEST HARNESS ONLY: the image stands in for a bare-metal GPU node. It carries the stand-in
# "hardware" tools from tests/harness/node/ (simulated GPU driver, nvidia-fs /proc and /sys
# entries, kallsyms); the roles under test never know about them.
# Skips the build when the image already exists and its recipe hash matches.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
IMAGE=${GDSFLEET_NODE_IMAGE:-localhost/gdsfleet-node:bookworm}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}

# One build at a time on this machine (pytest sessions, molecule and setup.sh may race).
exec 9>/var/tmp/gdsfleet-node-image.lock
flock 9

# The recipe hash: this script plus everything copied into the image.
recipe=$( (cat "$0"; find "$here/node" -type f -not -path '*/__pycache__/*' -print0 | sort -z | xargs -0 cat) | sha256sum | cut -c1-16)
if podman image exists "$IMAGE" && [ "$(podman image inspect --format '{{ index .Config.Labels "gdsfleet.recipe" }}' "$IMAGE" 2>/dev/null)" = "$recipe" ]; then
  echo "node image $IMAGE is current (recipe $recipe)"
  exit 0
fi

# The Debian mirror this machine already uses; never hard-code a mirror host.
mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
if [ -z "$mirror" ]; then
  mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
fi
[ -n "$mirror" ] || { echo "cannot find a Debian mirror in /etc/apt/sources.list(.d)" >&2; exit 1; }

work=$(mktemp -d /var/tmp/gdsfleet-rootfs.XXXXXX)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
echo "debootstrap bookworm from $mirror into $rootfs"
# The cluster infrastructure a GPU node of a Slurm cluster has before gdsfleet comes (Debian 12's
# own packages, none of them gdsfleet's to install): slurmd and munge, node_exporter; and
# slurmctld with the Slurm client commands, for the lab's one-node cluster, whose controller runs
# on the node itself (tests/molecule/test_slurm_prometheus_lab.py). No daemon of them runs unless
# a test starts it (PID 1 is gdsfleet-sim-init, not systemd).
cluster=slurmd,slurmctld,slurm-client,munge,prometheus-node-exporter
debootstrap --variant=minbase \
  --include=python3,python3-apt,openssh-server,kmod,xfsprogs,e2fsprogs,util-linux,gnupg,ca-certificates,mdadm,procps,iproute2,sudo,udev,pciutils,less,$cluster \
  bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

# Stand-in hardware layer (see docs/testing.md).
cp -a "$here/node/." "$rootfs/"
find "$rootfs/usr/local" -name __pycache__ -prune -exec rm -rf {} +
# The booted-kernel stand-in (node/usr/local/lib/gdsfleet-sim/uname-shim.c): uname() reports the
# kernel gdsfleet-sim-init decided the simulated boot loaded. Built here (the image has no
# compiler; the host's is Debian 12's like the image's) against symbols every glibc has.
gcc -O2 -shared -fPIC -Wall -Wextra -Werror -U_FORTIFY_SOURCE \
  -o "$rootfs/usr/local/lib/gdsfleet-sim/libgdsfleet-uname.so" \
  "$here/node/usr/local/lib/gdsfleet-sim/uname-shim.c"
# No secret in the image: the SSH host keys and the munge key its postinst made are removed; a
# node makes its host keys at boot, a test writes the cluster's munge key (one per cluster).
chroot "$rootfs" /bin/sh -c 'rm -f /etc/ssh/ssh_host_* /etc/munge/munge.key; mkdir -p /run/sshd /root/.ssh /etc/modules-load.d; chmod 700 /root/.ssh; apt-get clean; rm -rf /var/lib/apt/lists/*; rm -f /etc/apt/sources.list; rm -f /etc/apt/sources.list.d/*'

echo /usr/local/lib/gdsfleet-sim/libgdsfleet-uname.so > "$rootfs/etc/ld.so.preload"

tar -C "$rootfs" -c . | podman import \
  --change "LABEL gdsfleet.recipe=$recipe" \
  --change 'CMD ["/usr/local/sbin/gdsfleet-sim-init"]' - "$IMAGE" >/dev/null
echo "built $IMAGE (recipe $recipe)"

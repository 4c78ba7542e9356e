#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs INSIDE the lab VM (started by lab/vm.sh through virtme-ng); not for
# the host. With a run directory it runs the command stored there and writes
# its exit status to <run>/rc; with no argument it is the interactive shell.
set -uo pipefail

run=${1:-}

# virtme-ng finds its I/O ports (guest stdout/stderr/exit code back to the
# host) through udev's /dev/virtio-ports names. Without udev on the host
# (udev's coldplug costs 15+ s under TCG) it runs us on the serial console
# instead, so make those names ourselves from sysfs and reattach to them.
mkdir -p /dev/virtio-ports
for p in /sys/class/virtio-ports/*; do
	[[ -r $p/name ]] || continue
	n=$(<"$p/name")
	[[ -n $n && ! -e /dev/virtio-ports/$n ]] && ln -s "../${p##*/}" "/dev/virtio-ports/$n"
done
if [[ -n $run && -e /dev/virtio-ports/virtme.stdout ]]; then
	exec </dev/virtio-ports/virtme.stdin >/dev/virtio-ports/virtme.stdout 2>/dev/virtio-ports/virtme.stderr
fi

warn() { echo "lab(guest): $*" >&2; }

# Filesystems schedulers and tests expect. virtme-ng mounts cgroup2, debugfs
# and tracefs itself; fill in whatever is missing.
mnt() { mountpoint -q "$2" || mount -t "$1" "$1" "$2" 2>/dev/null || warn "cannot mount $1 on $2"; }
mnt cgroup2 /sys/fs/cgroup
mnt debugfs /sys/kernel/debug
mnt tracefs /sys/kernel/tracing
mnt bpf /sys/fs/bpf
# Delegate the usual controllers, as a kubelet host would have them.
for c in cpu cpuset memory pids io; do
	grep -qw "$c" /sys/fs/cgroup/cgroup.controllers 2>/dev/null &&
		echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
done
mkdir /sys/fs/cgroup/.lab-probe 2>/dev/null && rmdir /sys/fs/cgroup/.lab-probe || warn "cgroup2 is not writable"

# The host root is shared read-only; give /root a tmpfs upper layer so HOME
# (Go build cache, tool state) is writable while host files stay visible.
if ! touch /root/.lab-probe 2>/dev/null; then
	mkdir -p /run/lab/root/upper /run/lab/root/work
	mount -t overlay overlay -o lowerdir=/root,upperdir=/run/lab/root/upper,workdir=/run/lab/root/work /root ||
		warn "/root stays read-only"
else
	rm -f /root/.lab-probe
fi
export HOME=/root
ulimit -l unlimited 2>/dev/null || true

[[ -e /sys/kernel/sched_ext ]] || warn "no /sys/kernel/sched_ext in this kernel"
[[ -e /boot/config-$(uname -r) ]] || warn "/boot/config-$(uname -r) missing (run lab/kernel.sh on the host)"

if [[ -z $run ]]; then
	cd "$(dirname "${BASH_SOURCE[0]}")/.." 2>/dev/null || true
	exec bash -l
fi

# shellcheck source=/dev/null
source "$run/cmd" # sets env, cwd and the cmd array (written by vm.sh)
cd "$cwd" || { echo 125 >"$run/rc"; exit 125; }
"${cmd[@]}"
rc=$?
sync
echo "$rc" >"$run/rc"
dmesg >"$run/dmesg" 2>/dev/null
exit "$rc"

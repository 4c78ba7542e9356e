#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs INSIDE the lab VM (started by lab/vm.sh through virtme-ng); not for
# the host. With a run directory it runs the command stored there and writes
# its exit status to <run>/rc; with no argument it is the interactive shell.
#
# Every exec here re-reads its binary over 9p and runs under TCG (~0.3-1 s
# each on a busy host), so this sticks to bash builtins where it can.
set -uo pipefail

run=${1:-}
warn() { echo "lab(guest): $*" >&2; }

# virtme-ng sends the guest's stdout/stderr to the host through virtio
# ports it finds by udev's /dev/virtio-ports names. Without udev on the
# host (its coldplug costs 15+ s under TCG) it runs us on the serial
# console instead, so look the ports up in sysfs and reattach to them. The
# exit status travels in <run>/rc, not through virtme's port.
if [[ -n $run ]]; then
	declare -A port=()
	for p in /sys/class/virtio-ports/*; do
		[[ -r $p/name ]] && read -r n <"$p/name" && port[$n]=/dev/${p##*/}
	done
	in=${port[virtme.stdin]:-/dev/null}
	out=${port[virtme.stdout]:-}
	err=${port[virtme.stderr]:-}
	if [[ -n $out && -n $err ]]; then
		exec <"$in" >"$out" 2>"$err"
	else
		warn "virtme output ports not found; output goes to the console"
	fi
fi

# Filesystems schedulers and tests expect. virtme-ng mounts cgroup2, debugfs
# and tracefs itself; fill in whatever is missing.
declare -A mounted=()
while read -r _ mp _; do mounted[$mp]=1; done </proc/mounts
for m in cgroup2:/sys/fs/cgroup debugfs:/sys/kernel/debug tracefs:/sys/kernel/tracing bpf:/sys/fs/bpf; do
	[[ -n ${mounted[${m#*:}]:-} ]] || mount -t "${m%%:*}" "${m%%:*}" "${m#*:}" || warn "cannot mount ${m%%:*} on ${m#*:}"
done
# Delegate the usual controllers, as a kubelet host would have them.
if [[ -w /sys/fs/cgroup/cgroup.subtree_control ]]; then
	read -r -a have </sys/fs/cgroup/cgroup.controllers
	want=()
	for c in "${have[@]}"; do [[ $c =~ ^(cpu|cpuset|memory|pids|io)$ ]] && want+=("+$c"); done
	[[ ${#want[@]} = 0 ]] || echo "${want[*]}" >/sys/fs/cgroup/cgroup.subtree_control || warn "cannot enable cgroup controllers"
else
	warn "cgroup2 is not writable"
fi

# The host root is shared read-only; give /root a tmpfs upper layer so HOME
# (Go build cache, tool state) is writable while host files stay visible.
if [[ ! -w /root ]]; then
	if ! { mkdir -p /run/lab/root/upper /run/lab/root/work &&
		mount -t overlay overlay -o lowerdir=/root,upperdir=/run/lab/root/upper,workdir=/run/lab/root/work /root; }; then
		warn "/root stays read-only"
	fi
fi
export HOME=/root
ulimit -l unlimited 2>/dev/null || true

read -r rel </proc/sys/kernel/osrelease
[[ -e /sys/kernel/sched_ext ]] || warn "no /sys/kernel/sched_ext in this kernel"
[[ -e /boot/config-$rel ]] || warn "/boot/config-$rel missing (run lab/kernel.sh on the host)"

if [[ -z $run ]]; then
	here=${BASH_SOURCE[0]%/*}
	cd "$here/.." 2>/dev/null || true
	exec bash -l
fi

# shellcheck source=/dev/null
source "$run/cmd" # sets env, cwd and the cmd array (written by vm.sh)
# shellcheck disable=SC2154 # cwd and cmd come from $run/cmd
# The host retries a boot that QEMU itself aborted before this line, and
# never one after: the marker says the command has begun.
: >"$run/started"
{
	cd "$cwd" || { echo 125 >"$run/rc"; exit 125; }
	"${cmd[@]}"
}
rc=$?
# 9p writes are synchronous: once rc is there the host can read it.
[[ $rc = 0 ]] || dmesg >"$run/dmesg" 2>/dev/null
echo "$rc" >"$run/rc"
exit "$rc"

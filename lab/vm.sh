#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Boots a sched_ext kernel under QEMU (TCG) with virtme-ng and runs a command
# in it as root, in the repo directory (writable), exiting with the command's
# own exit status. The host root is shared read-only, so host binaries
# (build/, stress-ng, go test binaries) are all there.
#
# Usage: lab/vm.sh [--kernel newest|older|VERSION] [--cpus N] [--memory SIZE]
#                  [--topology SOCKETS,CORES,THREADS] [--rwdir DIR]...
#                  [--timeout SECS] [--append KARGS]... [--net] [--verbose]
#                  [--hostfwd HOSTPORT:GUESTPORT]... -- COMMAND...
#        lab/vm.sh [--kernel ...] [--cpus N] [--memory SIZE] shell
#
# --topology gives the guest that many sockets (each its own last-level
# cache), cores per socket and SMT threads per core, instead of --cpus flat
# CPUs: e.g. 2,1,2 is 4 CPUs, two SMT pairs on two LLCs.
#
# --net gives the guest a NIC on QEMU user-mode networking (slirp) with the
# address 10.0.2.15/24 and no default route: the guest reaches services that
# listen on the host's loopback at 10.0.2.2 (e.g. a kube-apiserver from
# internal/kubetest) and nothing else. Off by default; command mode only.
# --hostfwd (implies --net) forwards the host's 127.0.0.1:HOSTPORT to the
# guest's GUESTPORT (TCP), the one way in: e.g. the cluster lab's egress
# proxy, through which the host's kube-apiserver reaches the kubelet.
#
# Exit status: the command's; 124 if --timeout hit; 125 if the VM failed to
# boot or the command never ran.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
LAB_DIE_RC=125 # a lab failure must not pass for the command's own status

usage() {
	sed -n 's/^# \{0,1\}\(Usage:\|       \)\(.*\)$/\1\2/p' "$0" | sed 's/^/  /' >&2
	exit "${1:-125}"
}

kernel=newest cpus=2 memory=2G timeout=1800 verbose=0 net=0 rwdirs=() kargs=() mode= topology= hostfwd=
while [[ $# -gt 0 ]]; do
	case $1 in
	--kernel) kernel=${2:?--kernel needs a value}; shift 2 ;;
	--cpus) cpus=${2:?--cpus needs a value}; shift 2 ;;
	--topology) topology=${2:?--topology needs SOCKETS,CORES,THREADS}; shift 2 ;;
	--memory) memory=${2:?--memory needs a value}; shift 2 ;;
	--rwdir) rwdirs+=("$(realpath -m "${2:?--rwdir needs a value}")"); shift 2 ;;
	--timeout) timeout=${2:?--timeout needs a value}; shift 2 ;;
	--append) kargs+=(--append "${2:?--append needs kernel arguments}"); shift 2 ;;
	--net) net=1; shift ;;
	--hostfwd)
		[[ ${2:-} =~ ^[0-9]+:[0-9]+$ ]] || die "--hostfwd needs HOSTPORT:GUESTPORT, e.g. 18131:8131"
		hostfwd+=",hostfwd=tcp:127.0.0.1:${2%%:*}-:${2##*:}" net=1; shift 2 ;;
	--verbose | -v) verbose=1; shift ;;
	--) shift; mode=run; break ;;
	shell) shift; mode=shell; break ;;
	-h | --help) usage 0 ;;
	*) echo "lab: error: unknown argument '$1'" >&2; usage ;;
	esac
done
[[ -n $mode ]] || usage
[[ $mode = shell || $# -gt 0 ]] || { echo "lab: error: no command after --" >&2; usage; }
[[ $cpus =~ ^[1-9][0-9]*$ ]] || die "--cpus must be a positive integer"
[[ $timeout =~ ^[0-9]+$ ]] || die "--timeout must be seconds (0 = none)"
smp=
if [[ -n $topology ]]; then
	[[ $topology =~ ^([1-9][0-9]*),([1-9][0-9]*),([1-9][0-9]*)$ ]] ||
		die "--topology must be SOCKETS,CORES,THREADS, e.g. 2,1,2"
	cpus=$((BASH_REMATCH[1] * BASH_REMATCH[2] * BASH_REMATCH[3]))
	smp=" -smp $cpus,sockets=${BASH_REMATCH[1]},cores=${BASH_REMATCH[2]},threads=${BASH_REMATCH[3]}"
fi

[[ -x $VENV/bin/vng ]] || die "virtme-ng missing: run lab/deps.sh"
qemu=$(qemu_bin) || exit 125
kdir=$("$LAB_DIR/kernel.sh" "$kernel") || exit 125
export PATH=$VENV/bin:$PATH

vng=(vng --run "$kdir/vmlinuz" --disable-kvm --force-9p
	--cpus "$cpus" --memory "$memory" --qemu "$qemu"
	# MTTCG: one host thread per vCPU. Safe with sched_ext on QEMU >= 10
	# only (7.2 oopses the guest on scheduler attach/detach).
	# A later -smp (--topology) overrides the flat one virtme-ng passes.
	--qemu-opts="-accel tcg,thread=multi$smp"
	# A loaded host delays the guest's clocksource watchdog reads and can
	# demote the TSC to the (much slower under TCG) HPET mid-benchmark; the
	# TCG TSC follows the host clock, so trust it.
	--append 'tsc=reliable'
	# q35's chipset devices (AHCI, LPC, SMBus, watchdogs, kvm on -cpu max)
	# would each cost a module load under TCG if udev is around: skip them.
	--append 'modprobe.blacklist=kvm_amd,kvm_intel,kvm,ccp,sr_mod,cdrom,sg,ahci,libahci,libata,iTCO_wdt,intel_pmc_bxt,evdev,psmouse,aesni_intel,i2c_i801,serio_raw,i6300esb,pcspkr,lpc_ich,i2c_smbus,qemu_fw_cfg,button'
	--rwdir "$REPO" --cwd "$REPO")
for d in "${rwdirs[@]}"; do
	mkdir -p "$d"
	case $d/ in "$REPO"/*) ;; *) vng+=(--rwdir "$d") ;; esac # the repo is rw already
done
vng+=("${kargs[@]}")
# virtme-ng's own DHCP would wait forever for virtio_net, which nothing loads
# without udev; the guest side of --net is set up before the command instead.
# With forwards, the same NIC is declared here: virtme-ng's has no options.
if [[ -n $hostfwd ]]; then
	vng+=(--qemu-opts="-device virtio-net-pci,netdev=n0 -netdev user,id=n0$hostfwd")
elif [[ $net = 1 ]]; then
	vng+=(--network user --no-dhcp)
fi
[[ $verbose = 0 ]] || vng+=(--verbose)

if [[ $mode = shell ]]; then
	[[ $net = 0 ]] || die "--net works in command mode only (lab/vm.sh --net -- CMD...)"
	log "booting $(basename "$kdir") for an interactive shell (exit or Ctrl-D to power off)"
	exec "${vng[@]}" --shell "$LAB_DIR/guest.sh"
fi

# Per-run directory, writable by the guest: the command, its exit status and
# the guest's dmesg. Kept only when something went wrong.
runs=$LAB_CACHE/runs
mkdir -p "$runs"
find "$runs" -mindepth 1 -maxdepth 1 -mmin +1440 -exec rm -rf {} + 2>/dev/null || true
run=$(mktemp -d "$runs/run.XXXXXX")
case $run/ in "$REPO"/*) ;; *) vng+=(--rwdir "$run") ;; esac
{
	# Host PATH (lab tools, Go, pyenv) plus any SWIFTLANE_* settings.
	printf 'export PATH=%q\n' "$PATH"
	export -p | grep -E '^declare -x (SWIFTLANE_[A-Za-z0-9_]*|TERM)=' || true
	# Same directory as on the host when inside the repo (writable there).
	case $PWD/ in "$REPO"/*) printf 'cwd=%q\n' "$PWD" ;; *) printf 'cwd=%q\n' "$REPO" ;; esac
	cmd=("$@")
	# slirp answers at 10.0.2.2 (host loopback) and 10.0.2.3 (DNS) on its
	# 10.0.2.0/24; without a default route the guest can reach nothing else.
	# shellcheck disable=SC2016 # expanded in the guest
	[[ $net = 0 ]] || cmd=(bash -c '
		fail() { echo "lab(guest): --net: $*" >&2; exit 125; }
		modprobe virtio_net || fail "cannot load virtio_net"
		dev=
		for n in /sys/bus/virtio/drivers/virtio_net/virtio*/net/*; do [[ -e $n ]] && dev=${n##*/}; done
		[[ -n $dev ]] || fail "no virtio_net interface appeared"
		ip link set dev "$dev" up && ip addr add 10.0.2.15/24 dev "$dev" || fail "cannot configure $dev"
		exec "$@"' lab-net "${cmd[@]}")
	declare -p cmd
} >"$run/cmd"

# Command mode is not interactive: keep QEMU off the terminal (a tty stdin
# would be put in raw mode, and a background process group reading it stops).
if [[ -t 0 || ! -e /proc/self/fd/0 ]]; then exec </dev/null; fi
to=()
[[ $timeout = 0 ]] || to=(timeout -k 10 "$timeout")
guest_cmd="exec bash $(printf %q "$LAB_DIR/guest.sh") $(printf %q "$run")"
# QEMU 10's multi-threaded TCG has aborted on one of its own assertions
# while a guest booted (msix_table_mmio_write, once so far: stop 46's CI, a
# 4-vCPU SMT guest). Nothing of the command has run then, so boot again (up
# to SWIFTLANE_LAB_BOOT_TRIES boots, 3) and say so; an abort after the
# guest marked the command started ($run/started, written before $run/rc)
# fails like any other lab error, since a rerun would hide whatever the
# command did to the VM.
tries=${SWIFTLANE_LAB_BOOT_TRIES:-3}
[[ $tries =~ ^[1-9]$ ]] || die "SWIFTLANE_LAB_BOOT_TRIES must be 1-9, got '$tries'"
start=$(date +%s%N)
for ((try = 1; ; try++)); do
	: >"$run/qemu.err"
	set +e
	# QEMU reopens /proc/self/fd/1 and /fd/2 with O_TRUNC for each of virtme's
	# output ports; on a regular file those writers clobber each other, so
	# hand it pipes. Its stderr is kept to tell a QEMU abort apart.
	"${to[@]}" "${vng[@]}" --exec "$guest_cmd" 2> >(tee -a "$run/qemu.err" >&2) | cat
	vrc=${PIPESTATUS[0]}
	set -e
	wait # for the stderr copier
	[[ ! -e $run/started && $try -lt $tries ]] || break
	abort=$(grep -m1 -E '^qemu-system-[a-z0-9_]+: .*Assertion .* failed' "$run/qemu.err" || true)
	[[ -n $abort ]] || break
	log "QEMU aborted before the command started (boot $try of $tries): ${abort#qemu-system-*: }; booting again"
done
ms=$((($(date +%s%N) - start) / 1000000))

if [[ $vrc = 124 && $timeout -gt 0 && ! -e $run/rc ]]; then
	log "error: timed out after ${timeout}s ($(basename "$kdir")); run dir: $run"
	exit 124
fi
if [[ ! -s $run/rc ]]; then
	log "error: the VM did not run the command to completion (boot failure, guest panic or QEMU error; vng exit $vrc); retry with --verbose for the console. Run dir: $run"
	exit 125
fi
rc=$(<"$run/rc")
[[ $rc =~ ^[0-9]+$ ]] || die "bad exit status '$rc' in $run/rc"
if [[ $rc = 0 ]]; then
	rm -rf "$run"
else
	log "guest command exited $rc; guest dmesg: $run/dmesg"
fi
[[ ${SWIFTLANE_LAB_QUIET:-0} = 1 ]] || log "$(basename "$kdir"): $((ms / 1000)).$((ms % 1000 / 100))s for boot + command"
exit "$rc"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks lab/vm.sh's handling of a QEMU that aborts, with the abort injected:
# the one seen for real (an assertion in QEMU's MSI-X emulation while a
# 4-vCPU guest booted) cannot be caused on demand, so a wrapper named like
# QEMU (SWIFTLANE_LAB_QEMU) prints that assertion and dies of SIGABRT, either
# instead of booting or once the guest has started the command. Everything
# else is the real lab: kernel, QEMU, virtme-ng, guest.sh. Two real boots.
#
#   1. abort before the command: vm.sh boots again, the command runs once,
#      its exit status comes back;
#   2. abort on every boot: vm.sh gives up after SWIFTLANE_LAB_BOOT_TRIES
#      boots with 125 (no real boot);
#   3. abort while the command runs: no second boot, 125, the command
#      ran once.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

kernel=${1:-newest}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
real=$(qemu_bin)

# The wrapper. FAULT=boot: abort instead of the first BOOTS boots;
# FAULT=started: boot for real and abort once the command has begun. Calls
# without -kernel (virtme-ng's probes) go to QEMU untouched.
cat >"$tmp/qemu-system-x86_64" <<EOF
#!/usr/bin/env bash
abort() {
	echo "qemu-system-x86_64: hw/pci/msix.c:228: msix_table_mmio_write: Assertion \\\`injected by lab/selftest.sh' failed." >&2
	kill -ABRT "\$@"
}
[[ " \$* " = *" -kernel "* ]] || exec $(printf %q "$real") "\$@"
echo boot >>$(printf %q "$tmp/boots")
case \$FAULT in
boot)
	n=\$(wc -l <$(printf %q "$tmp/boots"))
	[[ \$n -gt \$BOOTS ]] || abort \$\$ ;;
started)
	$(printf %q "$real") "\$@" &
	q=\$!
	# -s, not -e: the guest's open(O_CREAT) and its write reach the host as
	# two 9p requests; aborting between them left an empty file (0 runs).
	until [[ -s $(printf %q "$tmp/rw/ran") ]]; do
		kill -0 \$q 2>/dev/null || { wait \$q; exit; }
		sleep 0.2 # polls a file the guest writes over 9p: no event to wait on from here
	done
	abort \$q
	wait \$q
	exit 134 ;;
esac
exec $(printf %q "$real") "\$@"
EOF
chmod +x "$tmp/qemu-system-x86_64"

fail=0
check() { # name, want rc, want boots, want command runs, got rc
	local boots=0 runs=0
	[[ ! -e $tmp/boots ]] || boots=$(wc -l <"$tmp/boots")
	[[ ! -e $tmp/ran ]] || runs=$(wc -l <"$tmp/ran")
	if [[ $5 = "$2" && $boots = "$3" && $runs = "$4" ]]; then
		log "selftest: ok: $1 (exit $5, $boots boot(s), command ran $runs time(s))"
	else
		log "selftest: FAIL: $1: exit $5 (want $2), $boots boot(s) (want $3), command ran $runs time(s) (want $4)"
		fail=1
	fi
	rm -f "$tmp/boots" "$tmp/ran"
}
vm() { # then: env for the wrapper. The guest command notes its run, then $then.
	local then=$1 rc=0
	shift
	log "selftest: the QEMU abort and lab errors below are injected"
	env "$@" SWIFTLANE_LAB_QEMU="$tmp/qemu-system-x86_64" SWIFTLANE_LAB_QUIET=1 \
		bash "$LAB_DIR/vm.sh" --timeout 600 --kernel "$kernel" --rwdir "$tmp/rw" -- \
		bash -c "echo ran >>$(printf %q "$tmp/rw/ran"); $then" >&2 2> >(tee "$tmp/err" >&2) || rc=$?
	wait # for tee
	[[ ! -e $tmp/rw/ran ]] || mv "$tmp/rw/ran" "$tmp/ran"
	# The run directories vm.sh kept of these injected failures.
	sed -n 's/.*\(Run dir: \|guest dmesg: \)\([^ ]*\)$/\2/p' "$tmp/err" | while read -r d; do
		d=${d%/dmesg}
		[[ $d = "$LAB_CACHE"/runs/run.* ]] && rm -rf "$d"
	done
	echo "$rc"
}
mkdir -p "$tmp/rw"

check "abort before the command: booted again" 7 2 1 "$(vm 'exit 7' FAULT=boot BOOTS=1)"
check "abort on every boot: gave up" 125 2 0 "$(vm 'exit 7' FAULT=boot BOOTS=9 SWIFTLANE_LAB_BOOT_TRIES=2)"
check "abort after the command started: not booted again" 125 1 1 "$(vm 'sleep 600' FAULT=started)"
exit "$fail"

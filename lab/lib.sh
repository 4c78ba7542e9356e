# SPDX-License-Identifier: Apache-2.0
# Shared by the lab scripts (sourced, not run): paths, logging, tool lookup.
# shellcheck disable=SC2034 # the variables are for the scripts sourcing this

LAB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$LAB_DIR/.." && pwd)
CACHE=${SWIFTLANE_CACHE:-$REPO/.cache}
LAB_CACHE=$CACHE/lab
VENV=$LAB_CACHE/venv
KERNELS=$LAB_CACHE/kernels

# clang/llvm-strip/bpftool: Debian installs clang-19 without the unversioned
# names, so put LLVM 19 first; bpftool lives in /usr/sbin.
export PATH=/usr/lib/llvm-19/bin:$PATH:/usr/sbin:/sbin

log() { echo "lab: $*" >&2; }
die() { echo "lab: error: $*" >&2; exit "${LAB_DIE_RC:-1}"; }

# QEMU 7.2 corrupts guests that attach/detach a sched_ext scheduler under
# multi-threaded TCG; refuse anything older than 10.
qemu_bin() {
	# SWIFTLANE_LAB_QEMU: another QEMU binary (lab/selftest.sh's fault
	# injection wraps the real one with it).
	local q=${SWIFTLANE_LAB_QEMU:-/usr/bin/qemu-system-x86_64} v
	[[ -x $q ]] || die "qemu-system-x86_64 missing: run lab/deps.sh"
	v=$("$q" --version | sed -n 's/^QEMU emulator version \([0-9]*\).*/\1/p')
	[[ ${v:-0} -ge 10 ]] || die "QEMU $v found, need >= 10 (bookworm-backports): run lab/deps.sh"
	echo "$q"
}

# The Debian mirror this machine already uses (deb822 or one-line format).
debian_mirror() {
	local uri
	uri=$(awk '/^URIs:/ && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	if [[ -z "$uri" ]]; then
		uri=$(awk '$1=="deb" && $2 !~ /^\[/ && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
	fi
	[[ -n "$uri" ]] || die "no Debian mirror found in /etc/apt/sources.list*; add one first"
	echo "$uri"
}

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds free5GC's gtp5g kernel module (the UPF data path free5GC drives) for
# a lab kernel, from the unmodified upstream tarball in shared/third_party
# plus our compatibility patch (lab/gtp5g/compat.patch), and prints the
# module's path (only that goes to stdout; logs go to stderr).
#
# Usage: lab/gtp5g.sh [newest|older|VERSION]   (as lab/kernel.sh)
#
# Exit status 3: the kernel cannot have gtp5g here (no headers package for
# it in the archive); the reason is also written to
# .cache/gtp5g/<release>/unavailable, where the VM tests read it.
#
# The module is built the way the kernel was: with Debian's trixie gcc-14
# (the kernels' flags include -fmin-function-alignment, which this host's
# gcc-12 refuses) and the kernel's headers package, in a trixie chroot made
# by mmdebstrap from the machine's Debian mirror and cached beside the
# module. pahole (dwarves) in the chroot and the headers' vmlinux give the
# module its BTF, which the tracer needs (/sys/kernel/btf/gtp5g).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

GTP5G_VERSION=0.10.2
GTP5G_SHA256=76d711c78b567051a03e9c63d3f96c4985f84c67c4dad3e79779ac2eb7606272
TARBALL=${SWIFTLANE_THIRD_PARTY:-$REPO/../shared/third_party}/gtp5g-$GTP5G_VERSION.tar.gz
PATCH=$LAB_DIR/gtp5g/compat.patch

sel=${1:-newest}
[[ $# -le 1 ]] || die "usage: lab/gtp5g.sh [newest|older|VERSION]"
[[ $(id -u) = 0 ]] || die "gtp5g.sh needs root (mmdebstrap, chroot)"
[[ -r $TARBALL ]] || die "$TARBALL missing: the gtp5g source comes from shared/third_party (SWIFTLANE_THIRD_PARTY overrides the folder)"
echo "$GTP5G_SHA256  $TARBALL" | sha256sum -c --quiet - >&2 || die "$TARBALL: sha256 differs from third_party/README.md's"

rel=$(cat "$(bash "$LAB_DIR/kernel.sh" "$sel")/release")
out=$CACHE/gtp5g/$rel
mkdir -p "$out"
exec 9>"$out/.lock"
flock 9

# Rebuilt when the source, the patch or this script change.
stamp=$( (echo "$GTP5G_SHA256"; cat "$PATCH" "${BASH_SOURCE[0]}") | sha256sum | cut -d' ' -f1)
if [[ -e $out/gtp5g.ko && $(cat "$out/.complete" 2>/dev/null) = "$stamp" ]]; then
	echo "$out/gtp5g.ko"
	exit 0
fi
rm -f "$out/.complete" "$out/unavailable" "$out/gtp5g.ko"

# Debian publishes a kernel's headers beside its image, but backports drop
# old ones first: 6.18.15's image is still there, its headers are not.
headers=linux-headers-$rel
if ! apt-cache show "$headers" >/dev/null 2>&1; then
	reason="no $headers package in the Debian archive (trixie-backports keeps headers only for its newest kernels), so gtp5g cannot be built for $rel"
	echo "$reason" >"$out/unavailable"
	log "$reason"
	exit 3
fi

root=$out/chroot
if [[ ! -e $root/.complete ]]; then
	command -v mmdebstrap >/dev/null || die "mmdebstrap missing: run lab/deps.sh"
	log "making a trixie chroot with gcc-14 and $headers (~3 min)"
	rm -rf "$root"
	uri=$(debian_mirror)
	mmdebstrap --variant=apt --include="make,gcc-14,libc6-dev,libelf-dev,dwarves,$headers" \
		trixie "$root" "deb $uri trixie main" "deb $uri trixie-backports main" >&2 ||
		die "mmdebstrap of the build chroot failed"
	touch "$root/.complete"
fi

# The headers are split into <rel> (the flavour's) and <version>-common.
common=$(ls -d "$root"/usr/src/linux-headers-*-common | head -1)
[[ -d $common ]] || die "no linux-headers-*-common in $root/usr/src"

# The four kernel API changes the patch covers, told by the headers
# themselves rather than by version numbers (lab/gtp5g/compat.patch).
defs=()
grep -q 'setup_udp_tunnel_sock(struct net \*net, struct sock \*sk' "$common/include/net/udp_tunnel.h" &&
	defs+=(-DGTP5G_COMPAT_UDP_TUNNEL_SK)
grep -q 'define flowi4_tos' "$common/include/net/flow.h" || defs+=(-DGTP5G_COMPAT_FLOWI4_DSCP)
grep -q 'struct sockaddr_unsized \*vaddr' "$common/include/linux/net.h" &&
	defs+=(-DGTP5G_COMPAT_SOCKADDR_UNSIZED)
grep -q 'NETDEV_PCPU_STAT_TSTATS' "$common/include/linux/netdevice.h" &&
	defs+=(-DGTP5G_COMPAT_PCPU_STAT_TYPE)

log "building gtp5g $GTP5G_VERSION for $rel (${defs[*]:-no compat macros})"
rm -rf "$root/build" && mkdir -p "$root/build"
tar xzf "$TARBALL" -C "$root/build"
src=/build/gtp5g-$GTP5G_VERSION
patch -d "$root$src" -p1 --quiet <"$PATCH" >&2 || die "lab/gtp5g/compat.patch does not apply to gtp5g $GTP5G_VERSION"
# objtool reads /proc/self/limits: /proc is mounted in a private mount
# namespace, so nothing stays mounted if the build is interrupted.
if ! unshare --mount --propagation private bash -c '
	mount -t proc proc "$1/proc" &&
	chroot "$1" make -C "/usr/src/$2" M="$3" KCFLAGS="$4" -j"$(nproc)" modules' \
	_ "$root" "$headers" "$src" "${defs[*]}" >"$out/build.log" 2>&1; then
	grep -m1 -E 'error' "$out/build.log" >&2 || tail -20 "$out/build.log" >&2
	die "gtp5g build failed for $rel (log: $out/build.log)"
fi
ko=$root$src/gtp5g.ko
grep -q 'Skipping BTF generation' "$out/build.log" && die "gtp5g built without BTF (log: $out/build.log)"
readelf -S "$ko" | grep -q '\.BTF' || die "gtp5g.ko has no .BTF section (log: $out/build.log)"
cp "$ko" "$out/gtp5g.ko"
echo "$stamp" >"$out/.complete"
log "gtp5g for $rel: $out/gtp5g.ko"
echo "$out/gtp5g.ko"

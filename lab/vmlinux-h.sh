#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Writes the vmlinux.h (all kernel types, from BTF) of a lab kernel, for
# building the BPF code against it.
#
# Usage: lab/vmlinux-h.sh [newest|older|VERSION] [OUT]   (OUT default: stdout)
# OUT is left untouched when its content would not change, so make does not
# rebuild the BPF objects for nothing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

sel=newest out=-
case ${1:-} in
newest | older | [0-9]*) sel=$1; shift ;;
esac
[[ $# -le 1 ]] || die "usage: lab/vmlinux-h.sh [newest|older|VERSION] [OUT]"
out=${1:--}
command -v bpftool >/dev/null || die "bpftool missing: run lab/deps.sh"
kdir=$("$LAB_DIR/kernel.sh" "$sel")

# Cached beside the kernel: the dump takes a few seconds.
h=$kdir/vmlinux.h
if [[ ! -s $h || $h -ot $kdir/vmlinux ]]; then
	bpftool btf dump file "$kdir/vmlinux" format c >"$h.tmp" || die "bpftool btf dump failed for $kdir/vmlinux"
	mv "$h.tmp" "$h"
fi

if [[ $out = - ]]; then
	cat "$h"
elif ! cmp -s "$h" "$out"; then
	mkdir -p "$(dirname "$out")"
	cp "$h" "$out.tmp.$$" && mv "$out.tmp.$$" "$out"
	log "wrote $out (kernel $(<"$kdir/release"))"
fi

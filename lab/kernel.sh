#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetches a Debian kernel with sched_ext from trixie-backports into the cache
# and prints its directory (only that goes to stdout; logs go to stderr).
#
# Usage: lab/kernel.sh [newest|older|VERSION]
#   newest   newest generic -amd64 kernel with CONFIG_SCHED_CLASS_EXT=y
#   older    newest 6.18.x (last release with the old package layout and the
#            pre-6.19 kfunc API); else the oldest >= 6.16
#   VERSION  e.g. 7.3.4, 6.18, 6.18.15+deb13-amd64 (newest match wins)
#
# The directory holds: vmlinuz, vmlinux (with BTF), config, System.map,
# modules/ (symlinks into root/, the unpacked packages) and release.
# The host also gets /lib/modules/<release> and /boot/config-<release> as
# symlinks into it: virtme-ng shares the host root with the guest, so the
# guest sees its modules and the config file libbpf programs look for.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

sel=${1:-newest}
[[ $# -le 1 ]] || die "usage: lab/kernel.sh [newest|older|VERSION]"
[[ $(id -u) = 0 ]] || die "kernel.sh needs root (writes /lib/modules and /boot)"
for t in zstd dpkg-deb depmod; do
	command -v "$t" >/dev/null || die "$t missing: run lab/deps.sh"
done

mkdir -p "$KERNELS"
# One fetch at a time: two runs unpacking the same kernel would collide.
exec 9>"$KERNELS/.lock"
flock 9

# Releases known to the trixie-backports index, e.g. "7.3.4+deb13-amd64";
# only the generic flavour (-cloud lacks 9p and gtp, -rt is another kernel).
# (A glob over apt's lists: `apt-get indextargets` would cost ~1 s per call.)
index_releases() {
	local f
	for f in /var/lib/apt/lists/*_dists_trixie-backports_main_binary-amd64_Packages*; do
		[[ -e $f ]] || continue
		/usr/lib/apt/apt-helper cat-file "$f" |
			sed -n 's/^Package: linux-image-\([0-9][0-9.]*+[a-z0-9.]*-amd64\)$/\1/p'
	done
}

# The index plus kernels already cached, so a kernel dropped from backports
# (they keep only recent ones) stays usable once fetched.
releases() {
	{
		index_releases
		for d in "$KERNELS"/*/.complete; do
			[[ -e $d ]] && basename "$(dirname "$d")"
		done
	} | sort -uV
}

# Packages making up one kernel: the image and, from 6.19 on, the
# linux-binary/-base/-modules packages it is a meta package over.
packages_of() {
	local rel=$1 re
	re=${1//./[.]}
	re=${re//+/[+]}
	echo "linux-image-$rel"
	apt-cache depends --no-recommends --no-suggests "linux-image-$rel" 2>/dev/null |
		sed -n "s/^ *Depends: \(linux-\(base\|binary\|modules\)-$re\)$/\1/p"
}

first_of() { for f in "$@"; do [[ -e $f ]] && { echo "$f"; return 0; }; done; return 1; }

# Download + unpack one release into $KERNELS/<rel> (no-op when cached).
fetch() {
	local rel=$1 dir=$KERNELS/$1 tmp root f vmlinuz config sysmap moddir off
	[[ -e $dir/.complete ]] && return 0
	log "fetching kernel $rel"
	tmp=$(mktemp -d "$KERNELS/.tmp.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	mkdir -p "$tmp/debs" "$tmp/root"
	# apt downloads as the unprivileged _apt user when it can reach the dir.
	chmod 755 "$tmp"
	if id _apt >/dev/null 2>&1; then chown _apt "$tmp/debs"; fi
	mapfile -t pkgs < <(packages_of "$rel")
	# A stale index names files the mirror no longer has: refresh, retry once.
	if ! (cd "$tmp/debs" && apt-get download -q "${pkgs[@]}" >&2); then
		log "download failed; refreshing the apt index and retrying"
		rm -f /var/lib/apt/swiftlane-lab.updated
		bash "$LAB_DIR/apt-sources.sh" >&2
		(cd "$tmp/debs" && apt-get download -q "${pkgs[@]}" >&2) ||
			die "apt-get download ${pkgs[*]} failed"
	fi
	for f in "$tmp"/debs/*.deb; do dpkg-deb -x "$f" "$tmp/root"; done
	rm -rf "$tmp/debs"

	root=$tmp/root
	vmlinuz=$(first_of "$root/boot/vmlinuz-$rel" "$root/usr/lib/modules/$rel/vmlinuz" "$root/lib/modules/$rel/vmlinuz") ||
		die "$rel: no vmlinuz in ${pkgs[*]}"
	config=$(first_of "$root/boot/config-$rel" "$root/usr/lib/modules/$rel/config" "$root/lib/modules/$rel/config") ||
		die "$rel: no kernel config in ${pkgs[*]}"
	sysmap=$(first_of "$root/boot/System.map-$rel" "$root/usr/lib/modules/$rel/System.map" "$root/lib/modules/$rel/System.map") || sysmap=
	moddir=$(first_of "$root/lib/modules/$rel" "$root/usr/lib/modules/$rel") ||
		die "$rel: no modules in ${pkgs[*]}"

	# Debian ships no modules.dep (its postinst makes it); kmod 30 only looks
	# under <base>/lib/modules, so give usr-only trees that path too.
	if [[ ! -e $root/lib/modules ]]; then
		mkdir -p "$root/lib"
		ln -s ../usr/lib/modules "$root/lib/modules"
	fi
	depmod -a -b "$root" "$rel" || die "$rel: depmod failed"

	# Relative links, so the directory can be renamed into place.
	ln -s "${vmlinuz#"$tmp"/}" "$tmp/vmlinuz"
	ln -s "${config#"$tmp"/}" "$tmp/config"
	ln -s "${moddir#"$tmp"/}" "$tmp/modules"
	[[ -z $sysmap ]] || ln -s "${sysmap#"$tmp"/}" "$tmp/System.map"
	echo "$rel" >"$tmp/release"

	# vmlinux (for BTF): the bzImage payload is a zstd frame; zstd complains
	# about the data after it, so judge by the output, not the exit status.
	for off in $(LC_ALL=C grep -obUaP '\x28\xb5\x2f\xfd' "$vmlinuz" | cut -d: -f1); do
		tail -c +$((off + 1)) "$vmlinuz" | zstd -dcq 2>/dev/null >"$tmp/vmlinux" || true
		[[ $(head -c4 "$tmp/vmlinux" | od -An -tx1 | tr -d ' ') = 7f454c46 ]] && break
		rm -f "$tmp/vmlinux"
	done
	[[ -s $tmp/vmlinux ]] || die "$rel: could not extract vmlinux (no zstd payload in vmlinuz)"

	touch "$tmp/.complete"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	trap - EXIT
}

has_scx() { grep -qx 'CONFIG_SCHED_CLASS_EXT=y' "$KERNELS/$1/config"; }

# Version sort key check: is release $1 >= major.minor $2?
ver_ge() { [[ $(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1) = "$2" ]]; }

mapfile -t all < <(releases)
if [[ ${#all[@]} -eq 0 ]]; then
	log "no trixie-backports kernels in the apt index; adding the source and updating"
	rm -f /var/lib/apt/swiftlane-lab.updated
	bash "$LAB_DIR/apt-sources.sh" >&2
	mapfile -t all < <(releases)
	[[ ${#all[@]} -gt 0 ]] || die "no linux-image-*-amd64 in trixie-backports (apt index: lab/apt-sources.sh)"
fi

pick=
case $sel in
newest)
	# Newest first; skip (and forget) any release built without sched_ext.
	for ((i = ${#all[@]} - 1; i >= 0; i--)); do
		fetch "${all[i]}"
		if has_scx "${all[i]}"; then pick=${all[i]}; break; fi
		log "${all[i]} has no CONFIG_SCHED_CLASS_EXT=y; trying an older one"
		rm -rf "${KERNELS:?}/${all[i]}"
	done
	[[ -n $pick ]] || die "no trixie-backports kernel has CONFIG_SCHED_CLASS_EXT=y"
	;;
older)
	for r in "${all[@]}"; do [[ $r == 6.18.* ]] && pick=$r; done
	if [[ -z $pick ]]; then
		for r in "${all[@]}"; do ver_ge "$r" 6.16 && { pick=$r; break; }; done
	fi
	[[ -n $pick ]] || die "no 6.18.x nor any >= 6.16 kernel in trixie-backports"
	;;
*)
	for r in "${all[@]}"; do
		[[ $r == "$sel" || $r == "$sel"[.+-]* ]] && pick=$r
	done
	[[ -n $pick ]] || die "no kernel matching '$sel' in trixie-backports (have: ${all[*]: -5})"
	;;
esac

fetch "$pick"
has_scx "$pick" || die "$pick: CONFIG_SCHED_CLASS_EXT is not =y in its config"

dir=$KERNELS/$pick
# Host-side links for the shared-root guest (see header). Never clobber a
# real directory/file that some installed package owns.
link() {
	local target=$1 path=$2
	if [[ -e $path && ! -L $path ]]; then
		log "warning: $path exists and is not ours; leaving it"
		return 0
	fi
	[[ $(readlink "$path" 2>/dev/null) = "$target" ]] || ln -sfn "$target" "$path"
}
mkdir -p /lib/modules /boot
link "$(readlink -f "$dir/modules")" "/lib/modules/$pick"
link "$(readlink -f "$dir/config")" "/boot/config-$pick"

echo "$dir"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The images the upstream sig-network conformance tests run, built here
# (no registry is reachable), as OCI layout tarballs that containerd imports
# under the names e2e.test asks for. Names and versions are read from the
# e2e framework's image table (test/utils/image/manifest.go) of the release
# lab/k8s.sh --e2e built e2e.test from.
#
#   agnhost  k8s.io/kubernetes/test/images/agnhost built from source (lab/k8s.sh)
#            at /agnhost, as upstream, over the tools the tests run in it:
#            dash as sh, busybox (wget, ...), curl, OpenBSD nc (-v -u -w),
#            dig and getent (the DNS tests' probes), with their libraries,
#            from this host's Debian packages;
#   busybox  Debian's static busybox, entrypoint /bin/busybox;
#   glibc-dns-testing  the DNS tests' second prober (glibc's resolver):
#            the same shell, busybox, dig and getent, entrypoint busybox;
#   coredns  the cluster DNS add-on (lab/k8s.sh builds it), at /coredns as
#            upstream, named as kubeadm would pull it.
#
# The e2e pause image is the lab's pause (mk/conformance.mk: it needs the
# swiftlane binary). Other images of the suite are not built; the tests
# that use them are named in docs/lb.md.
#
# Usage: mk/conformance-images.sh K8S_BIN_DIR OUT_DIR
# Writes OUT_DIR/{agnhost,busybox,coredns}.tar and OUT_DIR/images.env (shell
# assignments: AGNHOST_IMAGE, BUSYBOX_IMAGE, COREDNS_IMAGE, PAUSE_IMAGE,
# K8S_RELEASE). Each
# tarball is rebuilt only when its stamp (release, image version, the Debian
# packages' versions) changes.
set -euo pipefail
bin=${1:?k8s bin dir} out=${2:?output dir}
cd "$(dirname "$0")/.."
log() { echo "conformance-images: $*" >&2; }
die() { echo "conformance-images: error: $*" >&2; exit 1; }

# package:file that proves it is installed
need=(busybox-static:/usr/bin/busybox curl:/usr/bin/curl netcat-openbsd:/usr/bin/nc.openbsd dash:/usr/bin/dash
	bind9-dnsutils:/usr/bin/dig)
missing=()
for p in "${need[@]}"; do [[ -e ${p#*:} ]] || missing+=("${p%%:*}"); done
if [[ ${#missing[@]} -gt 0 ]]; then
	[[ $(id -u) = 0 ]] || die "missing ${missing[*]}; run as root to install"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

stamp=$bin/.e2e.test.stamp
[[ -f $stamp && -x $bin/agnhost && -f $bin/.coredns.stamp ]] || die "no e2e.test, agnhost or coredns in $bin: run bash lab/k8s.sh --cluster --e2e"
# "k8s.io/kubernetes@v1.36.3 k8s.io/kubernetes/test/e2e"
read -r modver _ <"$stamp"
release=${modver#*@}
src=$(go env GOMODCACHE)/k8s.io/kubernetes@$release
manifest=$src/test/utils/image/manifest.go
[[ -f $manifest ]] || die "$manifest missing (go mod download k8s.io/kubernetes@$release)"

# registry: e.g. PromoterE2eRegistry -> registry.k8s.io/e2e-test-images
registry() { sed -n "s/^[[:space:]]*$1:[[:space:]]*\"\([^\"]*\)\",.*/\1/p" "$manifest" | head -1; }
# image ID -> registry/name:version, from configs[ID] = Config{list.REG, "name", "version"}
# (a function run in $(...) cannot stop the script: it prints nothing instead)
image() {
	local line reg re='list\.([A-Za-z0-9]+), "([^"]+)", "([^"]+)"'
	line=$(grep -E "^[[:space:]]*configs\[$1\] = Config\{" "$manifest") || return 0
	[[ $line =~ $re ]] || return 0
	reg=$(registry "${BASH_REMATCH[1]}")
	[[ -z $reg ]] || echo "$reg/${BASH_REMATCH[2]}:${BASH_REMATCH[3]}"
}
agnhost=$(image Agnhost) busybox=$(image BusyBox) pause=$(image Pause) dnstest=$(image GlibcDnsTesting)
[[ -n $agnhost && -n $busybox && -n $pause && -n $dnstest ]] ||
	die "cannot read the Agnhost, BusyBox, Pause and GlibcDnsTesting images from $manifest (got '$agnhost' '$busybox' '$pause' '$dnstest')"

mkdir -p "$out"
debs=$(dpkg-query -W -f '${Package}=${Version} ' busybox-static curl netcat-openbsd dash bind9-dnsutils libc-bin)

# copy FILE into root at the same path, with the libraries it loads.
copy_with_libs() {
	local root=$1 file=$2 lib
	install -D -m 0755 "$file" "$root$file"
	for lib in $(ldd "$file" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
		[[ -e $root$lib ]] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
	done
}

# busybox's applets as links in root/bin, but those named in $2.
applets() {
	local root=$1 except=" $2 " a
	mkdir -p "$root/bin"
	for a in $(busybox --list); do
		[[ $except = *" $a "* || -e $root/bin/$a ]] || ln -s busybox "$root/bin/$a"
	done
}

# build NAME IMAGE STAMP ROOTFS-FILLER BUILD-ARGS...
build() {
	local name=$1 ref=$2 key=$3 fill=$4 tar=$out/$1.tar
	shift 4
	if [[ -f $tar && $(cat "$tar.stamp" 2>/dev/null) = "$key" ]]; then return; fi
	local root
	root=$(mktemp -d "$out/$name-rootfs.XXXXXX")
	"$fill" "$root"
	log "building $ref -> $tar"
	go run ./internal/ociimage/cmd/image build -out "$tar.tmp" -name "$ref" -rootfs "$root" -title "$name" \
		-root -source-date-epoch 0 "$@" >&2
	rm -rf "$root"
	mv -f "$tar.tmp" "$tar"
	echo "$key" >"$tar.stamp"
}

# The DNS probes' tools: the shell they run in, dig, and getent (glibc's
# resolver, whose files and dns sources are inside libc since 2.34).
fill_dns_tools() {
	local root=$1
	# The shell is dash: Debian's static busybox runs its own applets
	# before searching PATH (nc without -v -u), whatever PATH holds.
	applets "$root" "nc sh busybox"
	install -m 0755 /usr/bin/busybox "$root/bin/busybox"
	copy_with_libs "$root" /usr/bin/dash
	ln -s ../usr/bin/dash "$root/bin/sh"
	copy_with_libs "$root" /usr/bin/dig
	copy_with_libs "$root" /usr/bin/getent
	mkdir -p "$root/etc" && echo "hosts: files dns" >"$root/etc/nsswitch.conf"
}

fill_agnhost() {
	local root=$1
	fill_dns_tools "$root"
	copy_with_libs "$root" /usr/bin/curl
	copy_with_libs "$root" /usr/bin/nc.openbsd
	ln -s nc.openbsd "$root/usr/bin/nc"
	# What upstream's Dockerfile adds besides: porter's TLS pair (its
	# working directory is /), netexec's upload dir, the second entrypoint.
	install -m 0644 "$src/test/images/agnhost/porter/localhost.crt" "$src/test/images/agnhost/porter/localhost.key" "$root/"
	mkdir -p "$root/uploads"
	ln -s agnhost "$root/agnhost-2"
}
fill_busybox() { applets "$1" "busybox"; }
# busybox is the image's binary (build's -binary): the rootfs has the rest.
fill_dnstest() { fill_dns_tools "$1" && rm "$1/bin/busybox"; }
# CoreDNS needs no tools; the layer holds what a resolver reads.
fill_coredns() { mkdir -p "$1/etc" && echo "hosts: files dns" >"$1/etc/nsswitch.conf"; }

build agnhost "$agnhost" "$agnhost $(cat "$bin/.agnhost.stamp") $debs" fill_agnhost \
	-binary "linux/amd64=$bin/agnhost" -path /agnhost -cmd pause -version "${agnhost##*:}"
build busybox "$busybox" "$busybox $debs" fill_busybox \
	-binary linux/amd64=/usr/bin/busybox -path /bin/busybox -cmd sh -version "${busybox##*:}"
build glibc-dns-testing "$dnstest" "$dnstest $debs" fill_dnstest \
	-binary linux/amd64=/usr/bin/busybox -path /bin/busybox -cmd sh -version "${dnstest##*:}"
# "github.com/coredns/coredns@v1.14.2 github.com/coredns/coredns"
read -r coredns_mod _ <"$bin/.coredns.stamp"
coredns=registry.k8s.io/coredns/coredns:${coredns_mod#*@}
build coredns "$coredns" "$coredns" fill_coredns \
	-binary "linux/amd64=$bin/coredns" -path /coredns -version "${coredns##*:}"

cat >"$out/images.env" <<EOF
K8S_RELEASE=$release
AGNHOST_IMAGE=$agnhost
BUSYBOX_IMAGE=$busybox
DNSTEST_IMAGE=$dnstest
COREDNS_IMAGE=$coredns
PAUSE_IMAGE=$pause
EOF
echo "$out/images.env"

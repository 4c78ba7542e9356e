#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the binaries of a real Kubernetes control plane for tests, from the Go
# module proxy only: kube-apiserver and kubectl (k8s.io/kubernetes), etcd
# (go.etcd.io/etcd/server/v3) and helm (helm.sh/helm/v3). Prints the bin dir,
# so callers can do SWL_K8S_BIN=$(bash lab/k8s.sh).
#
# --cluster adds what a one-node cluster needs beyond that (make test-cluster):
# kube-controller-manager, kube-scheduler, kubelet and kube-proxy, and
# containerd v2 with its runc shim and ctr (github.com/containerd/containerd/v2;
# Debian's containerd 1.6 is older than kubelet 1.36 supports). runc and the
# CNI plugins come from Debian (make deps).
#
# --e2e adds the upstream conformance suite at the cluster's release (make
# test-conformance): e2e.test (`go test -c k8s.io/kubernetes/test/e2e`),
# agnhost (k8s.io/kubernetes/test/images/agnhost), the binary of the image
# its tests run, and the cluster DNS add-on the Service tests resolve names
# with, CoreDNS (github.com/coredns/coredns, kubeadm's version for the release).
#
# Usage: lab/k8s.sh [--cluster] [--e2e] [--force]
#
# Binaries land in ${SWIFTLANE_CACHE:-.cache}/k8s/bin, each with a stamp of the
# module version it was built from; a rerun with every stamp current only
# prints the dir. Versions can be overridden with SWIFTLANE_K8S_VERSION,
# SWIFTLANE_ETCD_VERSION, SWIFTLANE_HELM_VERSION, SWIFTLANE_CONTAINERD_VERSION
# and SWIFTLANE_COREDNS_VERSION.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
log() { echo "k8s: $*" >&2; }
die() { echo "k8s: error: $*" >&2; exit 1; }

K8S_VERSION=${SWIFTLANE_K8S_VERSION:-v1.36.3}
ETCD_VERSION=${SWIFTLANE_ETCD_VERSION:-v3.6.16} # newest v3.6 on the proxy that builds with Go 1.26
HELM_VERSION=${SWIFTLANE_HELM_VERSION:-v3.22.0} # newest v3 on the proxy
CONTAINERD_VERSION=${SWIFTLANE_CONTAINERD_VERSION:-v2.4.2}
COREDNS_VERSION=${SWIFTLANE_COREDNS_VERSION:-v1.14.2} # kubeadm's CoreDNSVersion in v1.36
K8S_CACHE=$CACHE/k8s
BIN=$K8S_CACHE/bin

force=0 cluster=0 e2e=0
for arg; do
	case $arg in
	--force) force=1 ;;
	--cluster) cluster=1 ;;
	--e2e) e2e=1 ;;
	-h | --help) sed -n 's/^# \{0,1\}Usage: /Usage: /p' "$0" >&2; exit 0 ;;
	*) die "unknown argument '$arg' (usage: lab/k8s.sh [--cluster] [--e2e] [--force])" ;;
	esac
done

[[ $K8S_VERSION =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] ||
	die "SWIFTLANE_K8S_VERSION='$K8S_VERSION' is not a release like v1.36.3"
k8s_minor=${BASH_REMATCH[1]}
# k8s.io/kubernetes v1.Y.Z publishes its staging modules (k8s.io/api, ...) as v0.Y.Z.
staging_version=v0.${k8s_minor}.${BASH_REMATCH[2]}

# name module version package
targets=(
	"kube-apiserver k8s.io/kubernetes $K8S_VERSION k8s.io/kubernetes/cmd/kube-apiserver"
	"kubectl k8s.io/kubernetes $K8S_VERSION k8s.io/kubernetes/cmd/kubectl"
	"etcd go.etcd.io/etcd/server/v3 $ETCD_VERSION go.etcd.io/etcd/server/v3"
	"helm helm.sh/helm/v3 $HELM_VERSION helm.sh/helm/v3/cmd/helm"
)
if [[ $cluster = 1 ]]; then
	for c in kube-controller-manager kube-scheduler kubelet kube-proxy; do
		targets+=("$c k8s.io/kubernetes $K8S_VERSION k8s.io/kubernetes/cmd/$c")
	done
	for c in containerd containerd-shim-runc-v2 ctr; do
		targets+=("$c github.com/containerd/containerd/v2 $CONTAINERD_VERSION github.com/containerd/containerd/v2/cmd/$c")
	done
fi
if [[ $e2e = 1 ]]; then
	targets+=("e2e.test k8s.io/kubernetes $K8S_VERSION k8s.io/kubernetes/test/e2e"
		"agnhost k8s.io/kubernetes $K8S_VERSION k8s.io/kubernetes/test/images/agnhost"
		"coredns github.com/coredns/coredns $COREDNS_VERSION github.com/coredns/coredns")
fi

stamp_of() { echo "$2@$3 $4"; } # name module version package -> stamp text
current() { [[ $force = 0 && -x $BIN/$1 && -f $BIN/.$1.stamp && $(<"$BIN/.$1.stamp") = "$(stamp_of "$@")" ]]; }

# Fast path (no go invocation): everything already built at these versions.
todo=()
for t in "${targets[@]}"; do
	# shellcheck disable=SC2086 # t is "name module version package"
	current $t || todo+=("$t")
done
if [[ ${#todo[@]} = 0 ]]; then
	echo "$BIN"
	exit 0
fi

command -v go >/dev/null || die "go not found on PATH (Go >= 1.26 builds these binaries)"
command -v python3 >/dev/null || die "python3 not found on PATH (reads the upstream go.mod)"
# A module asking for a newer Go must fail here with a clear message, not
# fetch a toolchain; a go.work above the cache dir must not leak in.
export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0
mkdir -p "$BIN"
# Two runs at once (parallel make targets) would share the build modules.
exec 9>"$K8S_CACHE/.lock"
flock 9

# Prints go mod edit arguments that make a throwaway module build MODULE@VERSION
# the way its own repository does: same go version and godebug defaults, and
# every in-repo replace (./staging/..., ../api) of a module it requires turned
# into a replace by the published module at REPLACE_VERSION (empty: the
# version it requires, which exists for etcd's sibling modules).
modargs() {
	local gomod=$1 replace_version=$2
	go mod edit -json "$gomod" | python3 -c '
import json, sys
m = json.load(sys.stdin)
rv = sys.argv[1]
args = ["-go=" + m["Go"]]
for g in m.get("GoDebug") or []:
    args.append("-godebug=%s=%s" % (g["Key"], g["Value"]))
required = {r["Path"]: r["Version"] for r in m.get("Require") or []}
for r in m.get("Replace") or []:
    old, new = r["Old"]["Path"], r["New"]
    # Local-path replaces have no version; only modules the graph needs matter
    # (k8s.io/sample-cli-plugin, for one, is replaced but never published).
    if new.get("Version") or old not in required:
        continue
    args.append("-replace=%s=%s@%s" % (old, old, rv or required[old]))
print("\n".join(args))
' "$replace_version"
}

# Makes (once per module@version) the throwaway module that builds from.
prepare() {
	local module=$1 version=$2 replace_version=$3 src gomod
	src=$K8S_CACHE/src/${module//\//_}@$version
	if [[ -f $src/.ready ]]; then echo "$src"; return; fi
	rm -rf "$src"
	mkdir -p "$src"
	gomod=$(go mod download -json "$module@$version" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("GoMod") or "ERR " + d.get("Error", "?"))') ||
		die "cannot download $module@$version from the Go module proxy (GOPROXY=$(go env GOPROXY))"
	[[ $gomod != ERR* ]] || die "cannot download $module@$version: ${gomod#ERR }"
	local args
	mapfile -t args < <(modargs "$gomod" "$replace_version")
	(
		cd "$src"
		go mod init swiftlane.invalid/k8s-build >/dev/null 2>&1
		go mod edit "${args[@]}" -require="$module@$version"
	) || die "cannot set up the build module in $src"
	touch "$src/.ready"
	echo "$src"
}

ldflags_for() { # name version
	local v=$2 kv=()
	case $1 in
	kube-* | kubectl | kubelet | e2e.test | agnhost)
		# What kubernetes' own build stamps, so `kubectl version` and the
		# apiserver's /version report the release instead of v0.0.0-master.
		for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			kv+=("-X $p.gitVersion=$v" "-X $p.gitMajor=1" "-X $p.gitMinor=$k8s_minor" "-X $p.gitTreeState=clean")
		done ;;
	etcd) ;; # the version is compiled in
	helm) kv+=("-X helm.sh/helm/v3/internal/version.version=$v") ;;
	containerd | containerd-shim-runc-v2 | ctr) kv+=("-X github.com/containerd/containerd/v2/version.Version=$v") ;;
	esac
	echo "-s -w ${kv[*]}"
}

# Sets cpu to the CPU seconds (user + sys) of every child reaped so far; on a
# shared 2-core machine wall time alone says little. `times` must run in this
# shell (a subshell counts only its own children), hence the file.
cpu_file=$K8S_CACHE/.times
child_cpu() {
	local u s t sec total=0
	times >"$cpu_file"
	{ read -r _; read -r u s; } <"$cpu_file"
	for t in "$u" "$s"; do # like 12m3.456s; whole seconds are enough
		sec=${t#*m}
		total=$((total + ${t%%m*} * 60 + 10#${sec%%.*}))
	done
	cpu=$total
}

for t in "${todo[@]}"; do
	read -r name module version pkg <<<"$t"
	current "$name" "$module" "$version" "$pkg" && continue # built by a run we waited for
	rv=
	[[ $module = k8s.io/kubernetes ]] && rv=$staging_version
	src=$(prepare "$module" "$version" "$rv")
	log "building $name from $module@$version (minutes if the Go build cache is cold; log: $src/$name.log)"
	child_cpu
	start=$(date +%s) cpu0=$cpu
	# e2e.test is a package's test binary: its test-only imports are needed too.
	get=(go get) build=(go build)
	[[ $name = e2e.test ]] && get=(go get -t) build=(go test -c -vet=off)
	if ! (
		cd "$src"
		"${get[@]}" "$pkg@$version" &&
			"${build[@]}" -trimpath -ldflags="$(ldflags_for "$name" "$version")" -o "$BIN/.$name.tmp" "$pkg"
	) >"$src/$name.log" 2>&1; then
		tail -n 30 "$src/$name.log" >&2
		die "building $name from $module@$version failed (full log: $src/$name.log; 'requires go >= ...' means this Go $(go env GOVERSION) is too old)"
	fi
	mv -f "$BIN/.$name.tmp" "$BIN/$name"
	stamp_of "$name" "$module" "$version" "$pkg" >"$BIN/.$name.stamp"
	child_cpu
	log "built $name $version in $(($(date +%s) - start)) s wall, $((cpu - cpu0)) s CPU ($(du -m "$BIN/$name" | cut -f1) MB)"
done
echo "$BIN"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Host setup for the VM lab and the BPF build; idempotent, and quick when
# everything is already there (no apt run at all then).
#
# Usage: lab/deps.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

VNG_VERSION=1.42 # virtme-ng from PyPI, the sched_ext community CI's runner

[[ $(id -u) = 0 ]] || die "deps.sh needs root (apt-get install)"

# From bookworm: compiler, the lab's tools. busybox-static builds virtme-ng's
# initramfs; kmod (depmod/modprobe) and file are used by virtme-ng too.
main_pkgs=(clang-19 llvm-19 stress-ng zstd iproute2 kmod busybox-static file binutils python3-venv
	# bench-sched's workloads, run in the guest from the host's root:
	# perf bench, cyclictest and hackbench, a web server and its load.
	linux-perf rt-tests nginx wrk
	# make test-cluster's node, in the guest from the host's root: the OCI
	# runtime, the CNI plugins (bridge, host-local, portmap, loopback) and
	# iptables for kube-proxy and the bridge's masquerade.
	runc containernetworking-plugins iptables
	# The Grafana dashboard's test (TestDashboard*) runs every panel's query
	# against a real Prometheus scraping swiftlane; the guest uses the host's.
	prometheus
	# lab/gtp5g.sh: a trixie chroot with the lab kernels' compiler and
	# headers, to build free5GC's gtp5g module.
	mmdebstrap)
# From bookworm-backports: bookworm's QEMU 7.2 oopses guests on sched_ext
# attach/detach under multi-threaded TCG; bpftool/libbpf 1.1 predate
# struct_ops links and the kfunc BTF we need.
bpo_libs=(libbpf-dev libbpf1 bpftool)

# Version checks (dpkg --compare-versions) of what must come from backports.
ver() { dpkg-query -W -f='${Status} ${Version}\n' "$1" 2>/dev/null | awk '/^install ok installed/ {print $4}'; }
ge() { [[ -n $1 ]] && dpkg --compare-versions "$1" ge "$2"; }

need_qemu=0 need_pkgs=() new_services=()
for svc in nginx prometheus; do [[ -n $(ver "$svc") ]] || new_services+=("$svc"); done
ge "$(ver qemu-system-x86)" 1:10 || need_qemu=1
ge "$(ver libbpf-dev)" 1:1.4 || need_pkgs+=("${bpo_libs[@]/%//bookworm-backports}")
ge "$(ver bpftool)" 7.5 || need_pkgs+=(bpftool/bookworm-backports libbpf1/bookworm-backports)
for p in "${main_pkgs[@]}"; do [[ -n $(ver "$p") ]] || need_pkgs+=("$p"); done
vng_ok=0
compgen -G "$VENV/lib/python3*/site-packages/virtme_ng-$VNG_VERSION.dist-info" >/dev/null && vng_ok=1

if [[ $need_qemu = 1 || ${#need_pkgs[@]} -gt 0 ]]; then
	bash "$LAB_DIR/apt-sources.sh"
	apt=(apt-get -y -q --no-install-recommends -o DPkg::Lock::Timeout=600)
	export DEBIAN_FRONTEND=noninteractive
	if [[ $need_qemu = 1 ]]; then
		# -t lets QEMU's own packages (qemu-system-common/-data, seabios)
		# come from backports too, upgrading 7.2 in place instead of mixing.
		log "installing QEMU 10 from bookworm-backports"
		"${apt[@]}" -t bookworm-backports install qemu-system-x86 >&2 ||
			die "apt-get install qemu-system-x86 (bookworm-backports) failed"
	fi
	if [[ ${#need_pkgs[@]} -gt 0 ]]; then
		mapfile -t need_pkgs < <(printf '%s\n' "${need_pkgs[@]}" | sort -u)
		log "installing ${need_pkgs[*]}"
		# nginx and prometheus are for tests only, but their packages start
		# and enable a service on the host: a policy-rc.d saying no (honoured
		# by invoke-rc.d and deb-systemd-invoke) keeps them from starting,
		# and they are disabled after.
		policy=
		if [[ ${#new_services[@]} -gt 0 && ! -e /usr/sbin/policy-rc.d ]]; then
			policy=/usr/sbin/policy-rc.d
			printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
			trap 'rm -f "$policy"' EXIT
		fi
		# pkg/bookworm-backports pins just those packages, nothing else moves.
		"${apt[@]}" install "${need_pkgs[@]}" >&2 || die "apt-get install ${need_pkgs[*]} failed"
		[[ -z ${policy:-} ]] || rm -f "$policy" # ours only; the trap covers a failed install
		for svc in "${new_services[@]}"; do
			if [[ -d /run/systemd/system ]]; then
				systemctl disable --now "$svc.service" >&2 || log "note: could not disable the host's $svc.service"
			else
				update-rc.d "$svc" disable >/dev/null 2>&1 || true
			fi
		done
	fi
fi
qemu_bin >/dev/null

if [[ $vng_ok = 0 ]]; then
	log "installing virtme-ng $VNG_VERSION into $VENV"
	# Debian's python, not whatever python3 is first on PATH (pyenv).
	[[ -x $VENV/bin/python ]] || /usr/bin/python3 -m venv "$VENV" || die "cannot create venv $VENV (python3-venv)"
	"$VENV/bin/pip" install -q --disable-pip-version-check "virtme-ng==$VNG_VERSION" >&2 ||
		die "pip install virtme-ng==$VNG_VERSION failed"
fi

# With udev on the host, virtme-ng's init runs a full udev coldplug in the
# guest: +15-20 s per boot under TCG. The lab does without it.
if [[ -x /usr/lib/systemd/systemd-udevd || -x /lib/systemd/systemd-udevd ]]; then
	log "note: udev is installed; VM boots will be ~15 s slower (apt-get purge udev, if nothing here needs it)"
fi

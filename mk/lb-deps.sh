#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Host packages the load balancer's build, tests and benchmark need. Idempotent
# and fast when everything is present: apt is only touched for what is missing.
set -euo pipefail

# package:command-or-file that proves it is installed
need=(
	clang-19:/usr/bin/clang-19
	llvm-19:/usr/bin/llvm-strip-19
	linux-libc-dev:/usr/include/linux/bpf.h
	iproute2:/usr/sbin/tc
	iptables:/usr/sbin/iptables
	nftables:/usr/sbin/nft
	conntrack:/usr/sbin/conntrack
	linux-perf:/usr/bin/perf
	wrk:/usr/bin/wrk
	ipvsadm:/usr/sbin/ipvsadm
)
# libbpf-dev >= 1.4 (bpf_helpers.h) comes from bookworm-backports.
backports=(libbpf-dev:/usr/include/bpf/bpf_helpers.h)

missing=()
for p in "${need[@]}"; do [[ -e ${p#*:} ]] || missing+=("${p%%:*}"); done
missing_bp=()
for p in "${backports[@]}"; do [[ -e ${p#*:} ]] || missing_bp+=("${p%%:*}"); done
[[ ${#missing[@]} -eq 0 && ${#missing_bp[@]} -eq 0 ]] && exit 0

[[ $(id -u) -eq 0 ]] || { echo "lb-deps: missing ${missing[*]} ${missing_bp[*]}; run as root to install" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/lab/apt-sources.sh"
if [[ ${#missing[@]} -gt 0 ]]; then
	apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [[ ${#missing_bp[@]} -gt 0 ]]; then
	apt-get install -y -qq --no-install-recommends -t bookworm-backports "${missing_bp[@]}"
fi

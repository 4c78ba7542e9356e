#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the peer sched_ext schedulers the benchmarks compare against from
# crates.io into the cache (one shared target directory, so the crates they
# share build once; cached afterwards):
# scx_bpfland and scx_rustland, and for bench-sched scx_layered (layers of
# tasks with their own policies: the closest to swiftlane's strategies) and
# scx_lavd (finds latency-critical tasks by itself). A peer that fails to
# build is recorded with the reason in errors.json, so the benchmark reports
# why it is missing instead of dropping it.
#
# Usage: lab/peers.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PEER_VERSION=${PEER_VERSION:-1.1.4}
root=$CACHE/peers
mkdir -p "$root/bin" "$root/logs"
errors=$root/errors.json

# Build needs: clang (lib.sh puts LLVM 19 on PATH), libelf, zlib, libseccomp.
need=(libelf-dev zlib1g-dev libseccomp-dev pkg-config)
missing=()
for p in "${need[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if ((${#missing[@]})); then
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2 || die "apt-get install ${missing[*]} failed"
fi
cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
peers=(scx_bpfland scx_rustland scx_layered scx_lavd)
if [[ ! -x $cargo ]]; then
	{
		echo "{"
		sep=""
		for peer in "${peers[@]}"; do printf '%s  "%s": "cargo not found"\n' "$sep" "$peer"; sep=","; done
		echo "}"
	} >"$errors"
	die "cargo not found"
fi

declare -A why=()
for peer in "${peers[@]}"; do
	if [[ -x $root/bin/$peer ]] && "$root/bin/$peer" --version 2>/dev/null | grep -q "$PEER_VERSION"; then
		log "$peer $PEER_VERSION already built"
		continue
	fi
	log "building $peer $PEER_VERSION from crates.io (log: $root/logs/$peer.log)"
	if ! CARGO_TARGET_DIR=$root/target "$cargo" install --locked --root "$root" --version "$PEER_VERSION" "$peer" >"$root/logs/$peer.log" 2>&1; then
		why[$peer]="cargo install $peer@$PEER_VERSION failed: $(grep -m1 -E '^error' "$root/logs/$peer.log" || tail -n1 "$root/logs/$peer.log")"
		log "${why[$peer]}"
	fi
done

{
	echo "{"
	sep=""
	for peer in "${!why[@]}"; do
		printf '%s  "%s": %s\n' "$sep" "$peer" "$(printf '%s' "${why[$peer]}" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')"
		sep=","
	done
	echo "}"
} >"$errors"
exit 0

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs inside the lab VM for `make demo`: shows swiftlane attaching and a
# clean detach, then times the UDP probe, idle and with every CPU saturated,
# under EEVDF and swiftlane without and with a critical strategy, in rounds
# with the order rotated each round, into $1/demo-rounds.json (bench-sched
# -demo-host on the host prints them with the host's load and the verdicts).
# $1 is the build directory (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$build/swiftlane

echo "== kernel $(uname -r), $(nproc) CPUs; sched_ext state: $(cat /sys/kernel/sched_ext/state)"
cfg=$(mktemp --suffix=.yaml)
cat >"$cfg" <<'YAML'
strategies:
  - name: probe
    class: critical
    command_regex: 'swiftlane probe'
YAML
echo "== swiftlane run --config $cfg (a critical strategy for the probe), for a look:"
$bin run --config "$cfg" --metrics-addr 127.0.0.1:9461 &
pid=$!
for _ in $(seq 600); do [[ $(cat /sys/kernel/sched_ext/state) = enabled ]] && break; sleep 0.1; done
echo "   state: $(cat /sys/kernel/sched_ext/state), ops: $(cat /sys/kernel/sched_ext/root/ops)"
stress-ng --temp-path /tmp --quiet --cpu $((2 * $(nproc))) --timeout 5s
echo "== swiftlane stats after 5 s of stress-ng:"
# A starved guest (a busy host) can miss stats' 5 s timeout: not worth
# ending the demo for.
$bin stats || echo "   (no stats in time: the guest is slow, the host busy)"
kill -TERM $pid
wait $pid || true
echo "   state after detach: $(cat /sys/kernel/sched_ext/state)"

rounds=${SWIFTLANE_DEMO_ROUNDS:-5}
echo "== the UDP echo probe, idle and with every CPU saturated (stress-ng --cpu $((2 * $(nproc)))), $rounds rounds:"
"$build/bench-sched" -swiftlane "$bin" -demo "$rounds" -phase 2s \
	-variants eevdf,swiftlane,swiftlane-critical -out "$build/demo-rounds.json"

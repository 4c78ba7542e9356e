#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs inside the lab VM for `make demo`: shows swiftlane attaching, the UDP
# probe's latency with every CPU saturated, with and without a critical
# strategy, and a clean detach.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/swiftlane

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
$bin stats
kill -TERM $pid
wait $pid || true
echo "   state after detach: $(cat /sys/kernel/sched_ext/state)"

echo "== latency of the UDP echo probe with every CPU saturated (stress-ng --cpu $((2 * $(nproc)))):"
build/bench-sched -swiftlane $bin -samples 400 -phase 8s -workloads probe \
	-variants eevdf,swiftlane,swiftlane-critical -out bench/results/demo.json

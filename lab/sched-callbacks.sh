#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# What swiftlane's BPF callbacks cost per round trip of the idle probe, from
# the kernel's own BPF run-time statistics (kernel.bpf_stats_enabled; bpftool
# from lab/deps.sh). Run it in the guest:
#   lab/vm.sh --kernel newest -- bash lab/sched-callbacks.sh [SWIFTLANE_BIN [PEER_BIN...]]
# For swiftlane without strategies, with the probe critical, and for each peer
# named (an scx_* binary run with its defaults, e.g.
# .cache/peers/bin/scx_bpfland), it prints, per struct_ops callback, the
# calls per round trip, the time per call and the time per round trip, and
# the total, and for swiftlane its own counters per round trip (dispatch
# paths, wakeup preemptions, kicks). Under TCG the times are the emulated
# machine's (tens of times native); compare callbacks and variants, not
# hosts.
set -eu
source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"
bin=$(realpath "${1:-build/swiftlane}")
samples=3000
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sysctl -qw kernel.bpf_stats_enabled=1
printf 'strategies: []\n' > "$work/none.yaml"
printf 'strategies:\n  - name: probe\n    class: critical\n    command_regex: "swiftlane probe"\n' > "$work/critical.yaml"

profile() { # name scheduler-binary config
	start_variant "$work/$1.log" "$2" "$3"
	local sched=$sched_pid
	"$bin" probe echo --listen 127.0.0.1:7777 > /dev/null 2>&1 &
	local echo=$!
	sleep 0.5 # the echo server's socket; a round trip fails loudly if it is not there
	bpftool -j prog show > "$work/before.json"
	counters > "$work/before.prom"
	"$bin" probe rtt --target 127.0.0.1:7777 --samples $samples --interval 1ms --json "$work/rtt.json" > /dev/null
	bpftool -j prog show > "$work/after.json"
	counters > "$work/after.prom"
	kill "$echo"
	kill -INT "$sched"
	wait "$sched" || true
	python3 - "$1" "$work" <<'PY'
import json, sys
name, work = sys.argv[1], sys.argv[2]
before = {p["id"]: p for p in json.load(open(work + "/before.json"))}
rtt = json.load(open(work + "/rtt.json"))
n = rtt["samples"]
rows, total = [], 0
for p in json.load(open(work + "/after.json")):
    if p.get("type") != "struct_ops":
        continue
    b = before.get(p["id"], {})
    calls = p.get("run_cnt", 0) - b.get("run_cnt", 0)
    ns = p.get("run_time_ns", 0) - b.get("run_time_ns", 0)
    if calls:
        rows.append((ns, calls, p["name"]))
        total += ns
print(f"== {name}: probe avg {rtt['avg_us']:.0f} µs, p99 {rtt['p99_us']:.0f} µs, {n} round trips")
for ns, calls, cb in sorted(rows, reverse=True):
    print(f"  {cb:20s} {calls / n:6.2f} calls/rt  {ns / calls:8.0f} ns/call  {ns / n / 1000:7.1f} µs/rt")
print(f"  {'all callbacks':20s} {'':28s} {total / n / 1000:7.1f} µs/rt")

def prom(f):
    out = {}
    for line in open(f):
        if line.startswith("swiftlane_") and "_bucket" not in line:
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out
b, a = prom(work + "/before.prom"), prom(work + "/after.prom")
moved = {k: a[k] - b.get(k, 0) for k in sorted(a) if a[k] - b.get(k, 0) >= 1}
if moved:
    print("  swiftlane's counters over the round trips:")
for k, d in moved.items():
    print(f"    {k:60s} {d / n:7.2f}/rt")
PY
}

# counters: swiftlane's own counters and gauges (its metrics endpoint, the
# default address); nothing for a peer, which serves none.
counters() {
	python3 -c 'import sys, urllib.request
try: sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:9461/metrics", timeout=5).read().decode())
except OSError: pass'
}
profile swiftlane "$bin" "$work/none.yaml"
profile swiftlane-critical "$bin" "$work/critical.yaml"
for peer in "${@:2}"; do
	profile "$(basename "$peer")" "$(realpath "$peer")" "$work/none.yaml"
done

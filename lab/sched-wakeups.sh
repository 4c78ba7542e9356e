#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# Where the idle probe's wakeups go and what each kind costs, from the
# kernel's scheduler tracepoints (tracefs: sched_waking, sched_switch),
# under EEVDF, swiftlane and peers alternately in one boot.
# Run it in the guest:
#   lab/vm.sh --kernel newest -- bash lab/sched-wakeups.sh [ROUNDS [SCHEDULER_BIN...]]
# For every wakeup of the probe's threads (client and echo server) it notes
# the waker's CPU, the CPU the wakee last ran on, the CPU it next ran on,
# whether that CPU was idle when the wakeup came, and the time from the
# wakeup to the wakee running; it prints, per variant (EEVDF, then each
# binary given, named by its directory; default build/swiftlane), the wakeups per
# round trip by kind with their mean and p90 delay. A binary named scx_* is a
# peer run with its defaults (e.g. .cache/peers/bin/scx_bpfland);
# build/bench-sched is the sched_ext floor (no callbacks); any other
# is a swiftlane build run without strategies. The probe is build/swiftlane's
# (SWL_PROBE_BIN overrides). The tracing slows every variant alike; compare
# variants, not with untraced runs.
set -eu
source "$(dirname "${BASH_SOURCE[0]}")/guest-lib.sh"
rounds=${1:-2}
shift || true
bins=("${@:-build/swiftlane}")
probe_bin=$(realpath "${SWL_PROBE_BIN:-build/swiftlane}")
samples=2000
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tr=/sys/kernel/tracing
[[ -e $tr/trace ]] || mount -t tracefs nodev $tr
printf 'strategies: []\n' > "$work/none.yaml"

run() { # name [scheduler binary]
	local sched= echo
	if [[ -n ${2:-} ]]; then
		start_variant "$work/sched.log" "$2" "$work/none.yaml"
		sched=$sched_pid
	fi
	"$probe_bin" probe echo --listen 127.0.0.1:7777 > /dev/null 2>&1 &
	echo=$!
	sleep 0.5
	echo 0 > $tr/tracing_on
	echo > $tr/trace
	echo 16384 > $tr/buffer_size_kb
	for e in sched_waking sched_switch; do echo 1 > $tr/events/sched/$e/enable; done
	"$probe_bin" probe rtt --target 127.0.0.1:7777 --samples $samples --interval 1ms --json "$work/rtt.json" > /dev/null &
	local client=$!
	echo 1 > $tr/tracing_on
	wait $client
	echo 0 > $tr/tracing_on
	for e in sched_waking sched_switch; do echo 0 > $tr/events/sched/$e/enable; done
	cat $tr/trace > "$work/trace.txt"
	kill $echo
	wait $echo 2>/dev/null || true
	if [[ -n $sched ]]; then
		kill -INT $sched
		wait $sched || true
	fi
	python3 - "$1" "$work" $client $echo <<'PY'
import json, re, sys, collections
name, work, client, server = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rtt = json.load(open(work + "/rtt.json"))
line_re = re.compile(r"^\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): (\w+): (.*)$")
kv = lambda s: dict(re.findall(r"(\w+)=(\S+)", s))
probe = {client, server}
cur = {}          # cpu -> pid running (0: idle)
last_cpu = {}     # pid -> cpu it last ran on
pending = {}      # pid -> (time, waker's cpu, its previous cpu, cur at the wakeup)
kinds = collections.defaultdict(list)
lines = open(work + "/trace.txt").read().splitlines()
# First pass: threads of the two processes share their comm "swiftlane" and
# are woken by one another; take every thread that a probe thread wakes or
# is woken by, transitively, until it stops growing.
edges = []
for l in lines:
    m = line_re.match(l)
    if m and m.group(5) == "sched_waking":
        edges.append((int(m.group(2)), int(kv(m.group(6))["pid"]), m.group(1).strip(), kv(m.group(6)).get("comm")))
grow = True
while grow:
    grow = False
    for a, b, ca, cb in edges:
        if ca.startswith("swiftlane") and cb == "swiftlane" and (a in probe) != (b in probe):
            probe.update((a, b))
            grow = True
for l in lines:
    m = line_re.match(l)
    if not m:
        continue
    cpu, t, ev, rest = int(m.group(3)), float(m.group(4)), m.group(5), m.group(6)
    f = kv(rest)
    if ev == "sched_switch":
        prev, nxt = int(f["prev_pid"]), int(f["next_pid"])
        last_cpu[prev] = cpu
        cur[cpu] = nxt
        if nxt in pending:
            t0, wcpu, pcpu, idle_at = pending.pop(nxt)
            where = "waker's CPU" if cpu == wcpu else ("its previous CPU" if cpu == pcpu else "another CPU")
            idle = idle_at.get(cpu, 0) == 0
            kind = f"ran on {where}, {'idle' if idle else 'busy'} at the wakeup"
            kinds[kind].append((t - t0) * 1e6)
    elif ev == "sched_waking":
        p = int(f["pid"])
        if p in probe:
            pending[p] = (t, cpu, last_cpu.get(p, -1), dict(cur))
n = rtt["samples"]
print(f"== {name}: probe avg {rtt['avg_us']:.0f} µs, p99 {rtt['p99_us']:.0f} µs, {n} round trips, {len(probe)} probe threads")
tot = 0
for k, v in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
    v.sort()
    tot += sum(v)
    print(f"  {k:48s} {len(v) / n:5.2f}/rt  mean {sum(v) / len(v):7.0f} µs  p90 {v[int(0.9 * (len(v) - 1))]:7.0f} µs  {sum(v) / n:6.0f} µs/rt")
print(f"  {'all wakeups':48s} {sum(len(v) for v in kinds.values()) / n:5.2f}/rt  {'':30s} {tot / n:6.0f} µs/rt")
PY
}
for r in $(seq "$rounds"); do
	run eevdf
	for b in "${bins[@]}"; do
		run "$(basename "$(dirname "$(realpath "$b")")")/$(basename "$b")" "$(realpath "$b")"
	done
done

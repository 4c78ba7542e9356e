#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `make bench-torture`: runs the VM tests' TestTorture RUNS times on each
# kernel, every run in a fresh boot, keeps each run's output, and tallies
# them (bench-sched -torture-logs) into OUT as {kernel: {runs, survived}}.
# A run survives when the test passes; a boot that never reached the test is
# a lab error, reported but not counted as a run.
#
# Usage: mk/bench-torture.sh --runs N --logs DIR --out FILE --vmtest BIN
#                            --swiftlane BIN --tally BENCH_SCHED KERNEL...
# SWL_TORTURE_SECONDS (stress per case), SWL_TORTURE_MODES and
# SWL_TORTURE_CONFIG (YAML added to every case's config) pass through.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

runs=20 logs= out= vmtest= swiftlane= tally= kernels=()
while [[ $# -gt 0 ]]; do
	case $1 in
	--runs) runs=$2; shift 2 ;;
	--logs) logs=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--vmtest) vmtest=$2; shift 2 ;;
	--swiftlane) swiftlane=$2; shift 2 ;;
	--tally) tally=$2; shift 2 ;;
	-*) echo "bench-torture: unknown flag $1" >&2; exit 2 ;;
	*) kernels+=("$1"); shift ;;
	esac
done
[[ -n $logs && -n $out && -n $vmtest && -n $swiftlane && -n $tally && ${#kernels[@]} -gt 0 ]] ||
	{ sed -n '/^# Usage:/,/^# SWL_/s/^# //p' "$0" >&2; exit 2; }
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "bench-torture: --runs must be a positive number" >&2; exit 2; }

env=(SWIFTLANE_BIN="$swiftlane")
[[ -z ${SWL_TORTURE_SECONDS:-} ]] || env+=(SWL_TORTURE_SECONDS="$SWL_TORTURE_SECONDS")
[[ -z ${SWL_TORTURE_MODES:-} ]] || env+=(SWL_TORTURE_MODES="$SWL_TORTURE_MODES")
[[ -z ${SWL_TORTURE_CONFIG:-} ]] || env+=(SWL_TORTURE_CONFIG="$SWL_TORTURE_CONFIG")

rm -rf "$logs"
for k in "${kernels[@]}"; do
	mkdir -p "$logs/$k"
	for i in $(seq -w 1 "$runs"); do
		log=$logs/$k/run-$i.log
		echo "== bench-torture: kernel '$k', run $i of $runs (log: $log)"
		# The kernel release goes in the log first: the tally keys by it.
		# shellcheck disable=SC2016 # expanded in the guest
		bash "$here/lab/vm.sh" --timeout 2400 --kernel "$k" -- \
			bash -c 'echo "torture-kernel: $(uname -r)"; exec "$@"' guest \
			env "${env[@]}" "$vmtest" -test.v -test.run '^TestTorture$' -test.timeout 35m >"$log" 2>&1
		rc=$?
		echo "lab-exit: $rc" >>"$log"
		if [[ $rc = 0 ]]; then
			echo "   survived"
		else
			echo "   FAILED (exit $rc): $(grep -m3 -E -e '--- FAIL|^lab: error' "$log" | tr '\n' ' ')"
		fi
	done
done
"$tally" -torture-logs "$logs" -out "$out"

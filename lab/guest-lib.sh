# SPDX-License-Identifier: Apache-2.0
# Helpers for the scripts that run inside the lab guest (sourced).

# start_swiftlane BIN CONFIG LOG: runs `BIN run --config CONFIG` in the
# background, its output in LOG, and returns once the kernel reports the
# sched_ext scheduler enabled (30 s at most, else it prints LOG and exits
# the script); the scheduler's PID is in $swiftlane_pid.
start_swiftlane() {
	"$1" run --config "$2" > "$3" 2>&1 &
	swiftlane_pid=$!
	for _ in $(seq 150); do
		grep -q enabled /sys/kernel/sched_ext/state 2>/dev/null && return 0
		sleep 0.2
	done
	echo "swiftlane did not attach ($2)"
	cat "$3"
	exit 1
}

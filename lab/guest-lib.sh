# SPDX-License-Identifier: Apache-2.0
# Helpers for the scripts that run inside the lab guest (sourced).

# start_sched LOG CMD...: runs a sched_ext scheduler's command line in the
# background, its output in LOG, and returns once the kernel reports it
# enabled (30 s at most, else it prints LOG and exits the script); its PID is
# in $sched_pid.
start_sched() {
	local log=$1
	shift
	"$@" > "$log" 2>&1 &
	sched_pid=$!
	for _ in $(seq 150); do
		grep -q enabled /sys/kernel/sched_ext/state 2>/dev/null && return 0
		sleep 0.2
	done
	echo "scheduler did not attach: $*"
	cat "$log"
	exit 1
}

# start_variant LOG BIN CONFIG: start_sched for a variant of the guest
# scripts: a binary named scx_* is a peer, run with its defaults;
# bench-sched runs the sched_ext floor (a scheduler with no callbacks);
# any other is a swiftlane build, run with CONFIG.
start_variant() {
	if [[ $(basename "$2") == scx_* ]]; then
		start_sched "$1" "$2"
	elif [[ $(basename "$2") == bench-sched ]]; then
		start_sched "$1" "$2" -floor-scheduler
	else
		start_sched "$1" "$2" run --config "$3"
	fi
}

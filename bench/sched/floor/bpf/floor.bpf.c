/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The floor of sched_ext: a scheduler with no callbacks. The kernel then
 * places a waking task with its own idle-CPU selection (straight onto an
 * idle CPU's local queue when it finds one) and queues every other task in
 * one global FIFO. No BPF instruction runs on any scheduling event, so what
 * this scheduler costs beyond EEVDF is what sched_ext itself costs: the
 * part of a BPF scheduler's tax no policy can remove.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char _license[] SEC("license") = "GPL";

SEC(".struct_ops.link")
struct sched_ext_ops floor_ops = {
	.name = "swiftlane_floor",
};

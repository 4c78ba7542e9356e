// SPDX-License-Identifier: Apache-2.0

package sched

// The object and its Go types (from bpf/intf.h) are generated and committed,
// so building swiftlane needs no clang; `make verify-generate` checks them.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -no-global-types -type swl_stats -type swl_event -type swl_strategy -type swl_exit_info swiftlane bpf/swiftlane.bpf.c -- -O2 -g -Wall -Werror -Wno-missing-declarations -D__TARGET_ARCH_x86 -I./bpf

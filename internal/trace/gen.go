// SPDX-License-Identifier: Apache-2.0

package trace

// The object and its Go types (from bpf/gtp.h) are generated and committed,
// so building swiftlane needs no clang; `make verify-generate` checks them.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -no-global-types -type gtp_event -type gtp_key -type gtp_count -type gtp_cpu_counts gtp bpf/gtp.bpf.c -- -O2 -g -Wall -Werror -Wno-missing-declarations -D__TARGET_ARCH_x86 -ffile-prefix-map=$PWD=. -I./bpf -I../schedext/bpf

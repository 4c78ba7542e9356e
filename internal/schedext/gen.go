// SPDX-License-Identifier: Apache-2.0

package schedext

// The Go types of bpf/intf.h, the structs both schedulers share with this
// package, generated once here (the object itself holds no program and is
// never loaded). Generated and committed; `make verify-generate` checks
// them, and CheckLayout checks each scheduler's object against them.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -no-global-types -type swl_strategy -type swl_event -type swl_exit_info intf bpf/intf.bpf.c -- -O2 -g -Wall -Werror -Wno-missing-declarations -D__TARGET_ARCH_x86 -ffile-prefix-map=$PWD=. -I./bpf

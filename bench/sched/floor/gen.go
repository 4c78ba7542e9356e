// SPDX-License-Identifier: Apache-2.0

package floor

// The object holds no program, only the struct_ops map; it uses no kfunc,
// so one object serves every kernel. Generated and committed like the
// schedulers' (`make verify-generate`).
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -no-global-types floor bpf/floor.bpf.c -- -O2 -g -Wall -Werror -Wno-missing-declarations -D__TARGET_ARCH_x86 -ffile-prefix-map=$PWD=. -I../../../internal/schedext/bpf

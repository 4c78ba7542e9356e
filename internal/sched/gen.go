// SPDX-License-Identifier: Apache-2.0

package sched

// One object per kfunc API level (compat.h; schedext.LoadSpec picks one).
// The C includes this scheduler's own headers (bpf/) and those both
// schedulers share (../schedext/bpf). The objects and their Go types (from
// bpf/swiftlane.h; those of intf.h are generated in internal/schedext) are
// generated and committed, so building swiftlane needs no clang; `make
// verify-generate` checks they are current.
// -ffile-prefix-map keeps the checkout's path out of the object: clang
// orders BTF types differently for different source paths.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -no-global-types -type swl_stats swiftlane bpf/swiftlane.bpf.c -- -O2 -g -Wall -Werror -Wno-missing-declarations -D__TARGET_ARCH_x86 -DSWL_API=1 -ffile-prefix-map=$PWD=. -I./bpf -I../schedext/bpf
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -no-global-types swiftlaneV2 bpf/swiftlane.bpf.c -- -O2 -g -Wall -Werror -Wno-missing-declarations -D__TARGET_ARCH_x86 -DSWL_API=2 -ffile-prefix-map=$PWD=. -I./bpf -I../schedext/bpf
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -no-global-types swiftlaneV3 bpf/swiftlane.bpf.c -- -O2 -g -Wall -Werror -Wno-missing-declarations -D__TARGET_ARCH_x86 -DSWL_API=3 -ffile-prefix-map=$PWD=. -I./bpf -I../schedext/bpf

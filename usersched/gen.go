// SPDX-License-Identifier: Apache-2.0

package usersched

// One object per sched_ext kfunc API level, as for the in-kernel scheduler
// (compat.h; schedext.LoadSpec picks one). The C includes its own header
// (bpf/usersched.h) and those both schedulers share
// (../internal/schedext/bpf). The objects and their Go types (those of
// intf.h are generated in internal/schedext) are generated and committed;
// `make verify-generate` checks they are current.
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -no-global-types -type usr_task -type usr_decision -type usr_shared -type usr_stats usersched bpf/usersched.bpf.c -- -O2 -mcpu=v3 -g -Wall -Werror -Wno-missing-declarations -D__TARGET_ARCH_x86 -DSWL_API=1 -ffile-prefix-map=$PWD=. -I./bpf -I../internal/schedext/bpf
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -no-global-types userschedV2 bpf/usersched.bpf.c -- -O2 -mcpu=v3 -g -Wall -Werror -Wno-missing-declarations -D__TARGET_ARCH_x86 -DSWL_API=2 -ffile-prefix-map=$PWD=. -I./bpf -I../internal/schedext/bpf
//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -no-global-types userschedV3 bpf/usersched.bpf.c -- -O2 -mcpu=v3 -g -Wall -Werror -Wno-missing-declarations -D__TARGET_ARCH_x86 -DSWL_API=3 -ffile-prefix-map=$PWD=. -I./bpf -I../internal/schedext/bpf

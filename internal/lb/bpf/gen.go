// SPDX-License-Identifier: Apache-2.0

package bpf

// Two compilation units: lb (the tc program) and sock (the node's own
// sockets), which Load gives the maps of lb in place of its own; the Go
// types come from lb, so sock generates none of its own.
// The multiarch include directories supply <asm/types.h> for the uapi headers
// without needing gcc-multilib; the one that does not exist is ignored.
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -mcpu=v3 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu" -target bpfel -type svc_key -type svc_val -type slot_key -type backend -type flow -type session -type frag_key -type frag_val -type affinity_key -type affinity_val -type member_key -type svc_key6 -type svc_val6 -type backend6 -type flow6 -type session6 -type affinity_key6 -type src_range_key -type src_range_key6 -type lb_stats -type sweep_args lb lb.bpf.c -- -ffile-prefix-map=$PWD=. -I.
//go:generate go tool bpf2go -cc clang-19 -cflags "-O2 -mcpu=v3 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu -I/usr/include/aarch64-linux-gnu" -target bpfel -no-global-types sock sock.bpf.c -- -ffile-prefix-map=$PWD=. -I.

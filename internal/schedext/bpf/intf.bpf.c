// SPDX-License-Identifier: GPL-2.0-only
//go:build ignore

/*
 * Not a program: compiled only so that bpf2go generates this package's Go
 * types for intf.h (see ../gen.go). The pointers below make the compiler
 * emit the structs' BTF without allocating them.
 */
#include "vmlinux.h"
#include "intf.h"

struct swl_strategy *_swl_strategy;
struct swl_event *_swl_event;
struct swl_exit_info *_swl_exit_info;

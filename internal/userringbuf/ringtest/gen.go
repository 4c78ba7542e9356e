// SPDX-License-Identifier: Apache-2.0

package ringtest

//go:generate go tool bpf2go -cc clang-19 -strip llvm-strip-19 -target bpfel -no-global-types echo bpf/echo.bpf.c -- -O2 -g -Wall -Werror -Wno-missing-declarations -D__TARGET_ARCH_x86 -ffile-prefix-map=$PWD=. -I../../schedext/bpf

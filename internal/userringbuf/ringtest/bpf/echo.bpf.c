// SPDX-License-Identifier: GPL-2.0-only
//go:build ignore

/*
 * Test program for package userringbuf: checks its Producer and Consumer
 * against the kernel's own ring buffer code. It drains a user ring buffer
 * (written by userringbuf.Producer) and copies every record into a kernel
 * ring buffer (read back by userringbuf.Consumer).
 *
 * A test record starts with its own length as a little-endian u16: the
 * program copies exactly that many bytes, so a header length that disagreed
 * with the record would fail the read or misalign the next record.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char _license[] SEC("license") = "GPL";

#define MAX_RECORD 256

/* Both sizes are set by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_USER_RINGBUF);
	__uint(max_entries, 4096);
} in SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} out SEC(".maps");

__u64 echoed;    /* records copied to out */
__u64 bad;       /* records whose length prefix did not match */
__u64 out_full;  /* records lost because out was full */
long last_error; /* negative return of the last bpf_user_ringbuf_drain */

static long echo_one(struct bpf_dynptr *rec, void *ctx)
{
	__u8 buf[MAX_RECORD] = {};
	__u16 n;
	__u64 len;

	if (bpf_dynptr_read(&n, sizeof(n), rec, 0, 0) || n < sizeof(n) || n > MAX_RECORD) {
		bad++;
		return 0;
	}
	/* Make the verifier see the bounded value itself, not a copy the compiler checked. */
	len = n;
	barrier_var(len);
	if (len > MAX_RECORD || bpf_dynptr_read(buf, len, rec, 0, 0)) {
		bad++;
		return 0;
	}
	if (bpf_ringbuf_output(&out, buf, len, 0)) {
		out_full++;
		return 1; /* stop draining: the test reads out and drains again */
	}
	echoed++;
	return 0;
}

/* Run with BPF_PROG_TEST_RUN; returns the records drained (discarded ones not counted). */
SEC("syscall")
int drain(void *ctx)
{
	long n = bpf_user_ringbuf_drain(&in, echo_one, NULL, 0);

	if (n < 0)
		last_error = n;
	return n;
}

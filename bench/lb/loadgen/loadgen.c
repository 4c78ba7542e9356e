// SPDX-License-Identifier: Apache-2.0
//
// loadgen: the open-loop half of `make bench-lb` (wrk measures the closed-loop
// connection rate; Debian's wrk cannot pace requests).
//
//   loadgen latency ADDR PORT RATE SECONDS
//       Starts a new TCP connection every 1/RATE s on a fixed schedule, sends
//       one HTTP/1.1 request with "Connection: close" and reads the answer to
//       EOF. Each latency is measured from the connection's *scheduled* start,
//       so a stall delays everything queued behind it instead of hiding it
//       (no coordinated omission). Prints one latency in microseconds per
//       line, then "errors N" and "late N" (connections started more than
//       1 ms after their slot: the generator itself fell behind).
//       With LOADGEN_TIMES=FILE in the environment it also writes FILE:
//       "# start NS" (the first slot, CLOCK_MONOTONIC: bpftrace's and perf's
//       clock), then one "START LATENCY" line (µs, START from the first slot)
//       per finished connection, to place a stall in time against a trace.
//   loadgen stream ADDR PORT SECONDS
//       One connection sending 256 KiB writes for SECONDS, then a half close;
//       the sink answers with the byte count it read (8 bytes, big endian).
//       Prints "bytes N".
//
// One thread, epoll, non-blocking sockets: run it pinned to its own CPU.

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_NS (5LL * 1000000000LL) // a request still open after this is an error
#define MAX_EVENTS 256

static const char request[] = "GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n";

struct conn {
	int fd;
	int64_t sched; // scheduled start, ns
	size_t sent;
	int active;
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static struct sockaddr_in target(const char *addr, const char *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)) };
	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
		fprintf(stderr, "loadgen: %s is not an IPv4 address\n", addr);
		exit(2);
	}
	return sa;
}

static int latency(const char *addr, const char *port, long rate, double seconds)
{
	struct sockaddr_in sa = target(addr, port);
	long total = (long)(rate * seconds);
	if (rate <= 0 || total <= 0) {
		fprintf(stderr, "loadgen: RATE and SECONDS must be positive\n");
		return 2;
	}
	struct rlimit rl = { 65536, 65536 };
	setrlimit(RLIMIT_NOFILE, &rl); // best effort: in-flight connections need fds
	int ep = epoll_create1(0);
	if (ep < 0)
		die("epoll_create1");
	// Indexed by request number: the epoll cookie is the index.
	struct conn *c = calloc((size_t)total, sizeof(*c));
	int64_t *lat = calloc((size_t)total, sizeof(*lat));
	int64_t *at = calloc((size_t)total, sizeof(*at)); // lat[i]'s scheduled start
	if (!c || !lat || !at)
		die("calloc");
	long started = 0, finished = 0, errors = 0, late = 0, done = 0, oldest = 0;
	int64_t start = now_ns() + 10000000LL, interval = 1000000000LL / rate;
	struct epoll_event evs[MAX_EVENTS];
	char buf[4096];

	while (done < total) {
		int64_t t = now_ns();
		while (started < total && start + started * interval <= t) {
			struct conn *k = &c[started];
			k->sched = start + started * interval;
			if (t - k->sched > 1000000)
				late++;
			k->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
			int r = k->fd < 0 ? -1 : connect(k->fd, (struct sockaddr *)&sa, sizeof(sa));
			if (k->fd < 0 || (r < 0 && errno != EINPROGRESS)) {
				if (k->fd >= 0)
					close(k->fd);
				errors++, done++;
			} else {
				struct epoll_event ev = { .events = EPOLLOUT | EPOLLIN | EPOLLRDHUP, .data.u64 = (uint64_t)started };
				if (epoll_ctl(ep, EPOLL_CTL_ADD, k->fd, &ev) < 0)
					die("epoll_ctl");
				k->active = 1;
			}
			started++;
		}
		int64_t wait_ns = started < total ? start + started * interval - now_ns() : 100000000LL;
		int timeout_ms = wait_ns <= 0 ? 0 : (int)((wait_ns + 999999) / 1000000);
		// Sub-millisecond pacing: a zero timeout spins until the next slot.
		if (wait_ns > 0 && wait_ns < 1000000)
			timeout_ms = 0;
		int n = epoll_wait(ep, evs, MAX_EVENTS, timeout_ms);
		if (n < 0 && errno != EINTR)
			die("epoll_wait");
		t = now_ns();
		for (int i = 0; i < n; i++) {
			struct conn *k = &c[evs[i].data.u64];
			if (!k->active)
				continue;
			int fail = 0, eof = 0;
			if (evs[i].events & EPOLLERR)
				fail = 1;
			if (!fail && (evs[i].events & EPOLLOUT) && k->sent < sizeof(request) - 1) {
				ssize_t w = send(k->fd, request + k->sent, sizeof(request) - 1 - k->sent, MSG_NOSIGNAL);
				if (w < 0 && errno != EAGAIN)
					fail = 1;
				else if (w > 0)
					k->sent += (size_t)w;
				if (k->sent == sizeof(request) - 1) {
					struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = evs[i].data.u64 };
					epoll_ctl(ep, EPOLL_CTL_MOD, k->fd, &ev);
				}
			}
			if (!fail && (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))) {
				for (;;) {
					ssize_t r = read(k->fd, buf, sizeof(buf));
					if (r > 0)
						continue;
					if (r == 0)
						eof = 1;
					else if (errno != EAGAIN)
						fail = 1;
					break;
				}
			}
			if (fail || eof) {
				if (eof && !fail && k->sent == sizeof(request) - 1) {
					at[finished] = k->sched - start;
					lat[finished++] = t - k->sched;
				} else
					errors++;
				close(k->fd);
				k->active = 0;
				done++;
			}
		}
		// Requests open too long count as errors (a lost SYN is retried by
		// the kernel after 1 s, so 5 s means several losses).
		// Schedules only grow with the index: scan from the oldest open one
		// while they are past the timeout.
		for (; oldest < started && (!c[oldest].active || t - c[oldest].sched > TIMEOUT_NS); oldest++) {
			struct conn *k = &c[oldest];
			if (k->active) {
				close(k->fd);
				k->active = 0;
				errors++, done++;
			}
		}
	}
	for (long i = 0; i < finished; i++)
		printf("%lld\n", (long long)(lat[i] / 1000));
	printf("errors %ld\nlate %ld\n", errors, late);
	const char *times = getenv("LOADGEN_TIMES");
	if (times && *times) {
		FILE *f = fopen(times, "w");
		if (!f)
			die(times);
		fprintf(f, "# start %lld\n", (long long)start);
		for (long i = 0; i < finished; i++)
			fprintf(f, "%lld %lld\n", (long long)(at[i] / 1000), (long long)(lat[i] / 1000));
		if (fclose(f))
			die(times);
	}
	return 0;
}

static int stream(const char *addr, const char *port, double seconds)
{
	struct sockaddr_in sa = target(addr, port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect");
	static char buf[256 << 10];
	int64_t end = now_ns() + (int64_t)(seconds * 1e9);
	long long sent = 0;
	while (now_ns() < end) {
		ssize_t w = send(fd, buf, sizeof(buf), MSG_NOSIGNAL);
		if (w < 0)
			die("send");
		sent += w;
	}
	shutdown(fd, SHUT_WR);
	uint8_t b[8];
	size_t got = 0;
	while (got < sizeof(b)) {
		ssize_t r = read(fd, b + got, sizeof(b) - got);
		if (r <= 0)
			die("read sink count");
		got += (size_t)r;
	}
	unsigned long long n = 0;
	for (int i = 0; i < 8; i++)
		n = n << 8 | b[i];
	printf("bytes %llu\nsent %lld\n", n, sent);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 6 && !strcmp(argv[1], "latency"))
		return latency(argv[2], argv[3], atol(argv[4]), atof(argv[5]));
	if (argc == 5 && !strcmp(argv[1], "stream"))
		return stream(argv[2], argv[3], atof(argv[4]));
	fprintf(stderr, "usage: loadgen latency ADDR PORT RATE SECONDS | loadgen stream ADDR PORT SECONDS\n");
	return 2;
}

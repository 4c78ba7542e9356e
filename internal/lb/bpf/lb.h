// SPDX-License-Identifier: GPL-2.0-only
//go:build ignore

// Types shared by lb.bpf.c, sock.bpf.c and the Go loader. bpf2go generates
// the Go side from the BTF of these structs (-type flags in gen.go), so both
// sides agree on the layout by construction; keep every field naturally
// aligned and padded explicitly so the generated Go structs have no hidden
// holes.

#ifndef SWIFTLANE_LB_H
#define SWIFTLANE_LB_H

#include <linux/types.h>

// Tries per source-port allocation. Each try picks a port and inserts the
// reply-direction session in one step, so a concurrent CPU can never win the
// same port between "check" and "insert". A share f of the range in use
// fails f^SNAT_TRIES of allocations: at 13,000 NodePort connections/s each
// closed connection still holds its port for 2-3 s (CLOSED_REUSE_NS), about
// half of the default range per backend, and 5 tries failed 3 % of random
// picks; 16 fail 0.002 %. A try costs one hash insert.
#define SNAT_TRIES 16

// svc_val.flags
#define SVC_F_SNAT 0x1   // external traffic: rewrite the source to snat_addr (0: the address reached)
#define SVC_F_MAGLEV 0x2 // slots are a Maglev table: index by flow hash, not at random
#define SVC_F_SOURCE_RANGES 0x4 // new connections only from the frontend's src_ranges entries

// session.flags
#define SESS_F_REPLY 0x1   // entry translates backend -> client packets
#define SESS_F_SNAT 0x2    // the forward direction rewrites the source too
#define SESS_F_CLOSING 0x4 // TCP FIN or RST seen; user space expires it soon

// A service frontend: ClusterIP:port/proto, or node address:nodePort/proto.
struct svc_key {
	__be32 addr;
	__be16 port;
	__u8 proto;
	__u8 pad;
};

struct svc_val {
	__u32 id;           // key prefix of its slots in backend_slots
	__u32 count;        // number of valid slots, 0..count-1 (the table size for Maglev)
	__u32 flags;        // SVC_F_*
	__u32 affinity_sec; // sessionAffinity ClientIP timeout; 0: no affinity
	__be32 snat_addr;   // SVC_F_SNAT source; 0: the frontend address (a NodePort's node address)
	__u32 pad;
};

// ClientIP affinity: the backend a client's last new connection to a
// frontend went to, and when.
struct affinity_key {
	__u32 svc_id;
	__be32 client;
};

struct affinity_val {
	__u32 backend_id;
	__u32 pad;
	__u64 last_used; // bpf_ktime_get_ns() of that connection
};

// (frontend, backend) pairs that may take new connections; written only
// for frontends with affinity, whose remembered backend must still be one.
struct member_key {
	__u32 svc_id;
	__u32 backend_id;
};

struct slot_key {
	__u32 svc_id;
	__u32 slot;
};

struct backend {
	__be32 addr;
	__be16 port;
	__u16 pad;
};

// A 5-tuple as it appears on the wire when a packet reaches the program.
struct flow {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

// One direction of a translated connection: the tuple to write into packets
// that match the key. Forward and reply entries are created together.
struct session {
	__be32 saddr;
	__be32 daddr;
	__be16 sport;
	__be16 dport;
	__u32 backend_id; // forward entries: checked so removed backends stop receiving
	__u64 last_seen;  // bpf_ktime_get_ns() of the last packet
	__u32 flags;      // SESS_F_*
	__u32 pad;
};

// First fragment's ports, keyed by what every fragment of a datagram shares.
struct frag_key {
	__be32 saddr;
	__be32 daddr;
	__be16 id;
	__u8 proto;
	__u8 pad;
};

struct frag_val {
	__be16 sport;
	__be16 dport;
};

// IPv6: the same shapes with 16-byte addresses, in maps of their own so the
// IPv4 path keeps its small keys. Backend ids, slots and affinity members
// are shared between the families. Each is named as its IPv4 type with the
// suffix 6: the per-family macros (DEFINE_*) rely on it, and the Go
// side's shapes over the address type (family.go) convert to both.
struct svc_key6 {
	__be32 addr[4];
	__be16 port;
	__u8 proto;
	__u8 pad;
};

struct svc_val6 {
	__u32 id;
	__u32 count;
	__u32 flags;
	__u32 affinity_sec;
	__be32 snat_addr[4]; // SVC_F_SNAT source; all zero: the frontend address
};

struct backend6 {
	__be32 addr[4];
	__be16 port;
	__u16 pad;
};

struct flow6 {
	__be32 saddr[4];
	__be32 daddr[4];
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};

struct session6 {
	__be32 saddr[4];
	__be32 daddr[4];
	__be16 sport;
	__be16 dport;
	__u32 backend_id;
	__u64 last_seen;
	__u32 flags;
	__u32 pad;
};

struct affinity_key6 {
	__u32 svc_id;
	__be32 client[4];
};

// loadBalancerSourceRanges: the client prefixes a frontend flagged
// SVC_F_SOURCE_RANGES takes new connections from, in an LPM trie per
// family. prefixlen counts the bits after it: 32 for the service id, which
// must match whole, plus the range's own length.
struct src_range_key {
	__u32 prefixlen;
	__u32 svc_id;
	__be32 addr;
};

struct src_range_key6 {
	__u32 prefixlen;
	__u32 svc_id;
	__be32 addr[4];
};

// The sweep (sweep_delete in lb.bpf.c). User space reads the session maps and
// hands the entries that look idle to the program in batches of at most
// SWEEP_BATCH keys; the program decides on the entries as they are then.
// A run is one system call that nothing preempts: 512 keys took up to
// 0.5 ms, 128 take about 0.1 ms (BenchmarkSweepCall).
#define SWEEP_BATCH 128

// The program's context: the clock and the idle timeouts (each with
// last_seen_grain_ns added), which family's batch and how many keys; it
// writes back how many entries it deleted, and how many of them were
// forward entries (connections).
struct sweep_args {
	__u64 now;
	__u64 tcp_idle;
	__u64 udp_idle;
	__u64 closing_idle;
	__u32 family; // 4 or 6
	__u32 count;
	__u32 deleted;
	__u32 conns;
};

// Per-CPU counters; user space sums the CPUs.
struct lb_stats {
	__u64 fwd_packets;      // client -> backend packets translated
	__u64 reply_packets;    // backend -> client packets translated
	__u64 icmp_translated;  // ICMP errors about a session rewritten
	__u64 frag_translated;  // non-first fragments translated via frag map
	__u64 sessions_created; // forward+reply pairs inserted
	__u64 snat_allocations; // source ports allocated
	__u64 stale_backend;    // sessions re-balanced because their backend left
	__u64 affinity_hits;    // new connections sent to the client's remembered backend
	__u64 passed_to_stack;  // translated but not forwardable by us (local, TTL)
	__u64 neigh_redirects;  // forwarded by bpf_redirect_neigh: no neighbour entry yet (slow)
	__u64 drop_no_backend;  // service has no ready backend
	__u64 drop_no_port;     // SNAT_TRIES tries found no free port
	__u64 drop_session_map; // forward insert failed after the reply insert
	__u64 drop_frag;        // later fragment whose first fragment's session is gone
	__u64 drop_fib;         // route lookup says unreachable/blackhole
	__u64 drop_source_range; // new connection from outside the frontend's source ranges
	// The node's own sockets (sock.bpf.c): connects and unconnected UDP
	// datagrams sent to a backend instead of a frontend, and both refused
	// (no backend, or the source ranges keep the node out).
	__u64 host_connects;
	__u64 host_datagrams;
	__u64 host_refused;
};

#endif

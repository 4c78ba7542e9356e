// SPDX-License-Identifier: GPL-2.0-only
//go:build ignore

// The IPv6 path of lb.c (included there, after the IPv4 helpers it shares):
// the same session logic on 16-byte addresses. Packets whose next header is
// TCP or UDP are translated, and ICMPv6 errors about them; extension
// headers (fragments included) go to the stack untouched.

#ifndef SWIFTLANE_LB6_H
#define SWIFTLANE_LB6_H

static __always_inline bool addr6_eq(const __be32 *a, const __be32 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

static __always_inline bool addr6_zero(const volatile __be32 *a)
{
	return !(a[0] | a[1] | a[2] | a[3]);
}

static __always_inline void addr6_set(__be32 *dst, const volatile __be32 *src)
{
	dst[0] = src[0];
	dst[1] = src[1];
	dst[2] = src[2];
	dst[3] = src[3];
}

static __always_inline void reply_key6(struct flow6 *rk, const struct session6 *fwd, __u8 proto)
{
	addr6_set(rk->saddr, fwd->daddr);
	addr6_set(rk->daddr, fwd->saddr);
	rk->sport = fwd->dport;
	rk->dport = fwd->sport;
	rk->proto = proto;
	rk->pad[0] = rk->pad[1] = rk->pad[2] = 0;
}

static __always_inline void delete_pair6(const struct flow6 *f, const struct session6 *fwd)
{
	struct flow6 rk;

	reply_key6(&rk, fwd, f->proto);
	bpf_map_delete_elem(&sessions6, &rk);
	bpf_map_delete_elem(&sessions6, f);
}

// reclaim_closed for IPv6 (lb.c).
static __always_inline bool reclaim_closed6(const struct flow6 *rk, __u64 now)
{
	struct session6 *rev = bpf_map_lookup_elem(&sessions6, rk);
	struct flow6 fk, back;

	if (!rev || !(rev->flags & SESS_F_REPLY))
		return false;
	reply_key6(&fk, rev, rk->proto);
	struct session6 *fwd = bpf_map_lookup_elem(&sessions6, &fk);
	__u64 last = rev->last_seen;
	bool closing = rev->flags & SESS_F_CLOSING;
	bool paired = false;

	if (fwd && !(fwd->flags & SESS_F_REPLY)) {
		reply_key6(&back, fwd, rk->proto);
		paired = !__builtin_memcmp(&back, rk, sizeof(back));
	}
	if (paired) {
		closing |= fwd->flags & SESS_F_CLOSING;
		if (fwd->last_seen > last)
			last = fwd->last_seen;
	}
	if ((paired && !closing) || last > now || now - last < CLOSED_REUSE_NS)
		return false;
	if (paired)
		bpf_map_delete_elem(&sessions6, &fk);
	bpf_map_delete_elem(&sessions6, rk);
	return true;
}

static __always_inline bool backend_alive6(const struct session6 *s)
{
	__u32 id = s->backend_id;
	struct backend6 *b = bpf_map_lookup_elem(&backends6, &id);

	return b && addr6_eq(b->addr, s->daddr) && b->port == s->dport;
}

// Maglev: the IPv4 mix over each address folded to one word by XOR.
static __always_inline __u32 flow_hash6(const struct flow6 *f)
{
	return hash_mix(f->saddr[0] ^ f->saddr[1] ^ f->saddr[2] ^ f->saddr[3],
			f->daddr[0] ^ f->daddr[1] ^ f->daddr[2] ^ f->daddr[3], f->sport, f->dport, f->proto);
}

// create_session for IPv6; see there.
static __noinline int create_session6(const struct flow6 *f, const struct svc_val6 *svc,
					   struct session6 *out)
{
	struct slot_key sk = { .svc_id = svc->id };
	struct affinity_key6 ak = { .svc_id = svc->id };
	struct lb_stats *st = lookup_stats();
	__u64 now = bpf_ktime_get_ns();
	struct backend6 *b = NULL;
	__u32 backend_id = 0;
	__u32 count = svc->count;

	addr6_set(ak.client, f->saddr);
	if (svc->affinity_sec) {
		struct affinity_val *a = bpf_map_lookup_elem(&affinity6, &ak);
		if (a && now - a->last_used < (__u64)svc->affinity_sec * 1000000000ULL) {
			struct member_key mk = { .svc_id = svc->id, .backend_id = a->backend_id };
			backend_id = a->backend_id;
			if (bpf_map_lookup_elem(&svc_members, &mk))
				b = bpf_map_lookup_elem(&backends6, &backend_id);
			if (b && st)
				st->affinity_hits++;
		}
	}
	if (!b && count) {
		__u32 h = (svc->flags & SVC_F_MAGLEV) ? flow_hash6(f) : bpf_get_prandom_u32();
		sk.slot = h % count;
		__u32 *bid = bpf_map_lookup_elem(&backend_slots, &sk);
		if (!bid) {
			sk.slot = 0;
			bid = bpf_map_lookup_elem(&backend_slots, &sk);
		}
		if (bid) {
			backend_id = *bid;
			b = bpf_map_lookup_elem(&backends6, &backend_id);
		}
	}
	if (!b) {
		if (st)
			st->drop_no_backend++;
		return -1;
	}
	if (svc->affinity_sec) {
		struct affinity_val av = { .backend_id = backend_id, .last_used = now };
		bpf_map_update_elem(&affinity6, &ak, &av, BPF_ANY);
	}

	struct session6 fwd = { .sport = f->sport, .dport = b->port, .backend_id = backend_id, .last_seen = now };
	struct session6 rev = { .sport = f->dport, .dport = f->sport, .backend_id = backend_id,
				.last_seen = now, .flags = SESS_F_REPLY };
	addr6_set(fwd.saddr, f->saddr);
	addr6_set(fwd.daddr, b->addr);
	addr6_set(rev.saddr, f->daddr);
	addr6_set(rev.daddr, f->saddr);
	bool snat = false, tried_own = false;

	if (svc->flags & SVC_F_SNAT) {
		if (addr6_zero(svc->snat_addr))
			addr6_set(fwd.saddr, f->daddr);
		else
			addr6_set(fwd.saddr, svc->snat_addr);
		snat = true;
	} else if (addr6_eq(b->addr, f->saddr)) {
		if (addr6_zero(hairpin_addr6)) { // IPv6 hairpin not configured
			if (st)
				st->drop_no_backend++;
			return -1;
		}
		addr6_set(fwd.saddr, hairpin_addr6);
		snat = true;
	}

	struct flow6 rk;
	reply_key6(&rk, &fwd, f->proto);

	if (!snat) {
		if (bpf_map_update_elem(&sessions6, &rk, &rev, BPF_NOEXIST) == 0)
			goto insert_fwd;
		addr6_set(fwd.saddr, f->saddr);
		tried_own = true;
	}

	fwd.flags |= SESS_F_SNAT;
	rev.flags |= SESS_F_SNAT;
	__u32 i;
	bool ok = false;
	for (i = 0; i < SNAT_TRIES; i++) {
		__u16 port = bpf_ntohs(f->sport);

		if (i > 0 || tried_own || !port_allowed(port))
			port = random_port();
		if (!port_allowed(port))
			continue;
		rk.dport = bpf_htons(port);
		if (bpf_map_update_elem(&sessions6, &rk, &rev, BPF_NOEXIST) == 0 ||
		    (reclaim_closed6(&rk, now) && bpf_map_update_elem(&sessions6, &rk, &rev, BPF_NOEXIST) == 0)) {
			ok = true;
			break;
		}
	}
	count_tries(ok ? i : SNAT_TRIES);
	if (!ok) {
		if (st)
			st->drop_no_port++;
		return -1;
	}
	fwd.sport = rk.dport;
	if (st)
		st->snat_allocations++;

insert_fwd:
	if (bpf_map_update_elem(&sessions6, f, &fwd, BPF_NOEXIST) != 0) {
		bpf_map_delete_elem(&sessions6, &rk);
		struct session6 *won = bpf_map_lookup_elem(&sessions6, f);
		if (!won) {
			if (st)
				st->drop_session_map++;
			return -1;
		}
		*out = *won;
		return 0;
	}
	if (st)
		st->sessions_created++;
	*out = fwd;
	return 0;
}

#define IP6_OFF ETH_HLEN
#define L4_OFF6 (IP6_OFF + sizeof(struct ipv6hdr))

// translate for IPv6: no header checksum, a hop limit instead of a TTL; the
// L4 checksum takes the address change as a pseudo-header diff and the port
// change apart, for the reason given at translate.
static __noinline int translate6(struct __sk_buff *skb, __u8 l4proto, const struct flow6 *old,
				      const struct session6 *to)
{
	struct bpf_fib_lookup p = {};
	long rc = -1;
	bool redirect = false;

	void *data = pkt_data(skb), *end = pkt_end(skb);
	struct ipv6hdr *ip6 = data + IP6_OFF;
	if ((void *)(ip6 + 1) > end)
		return TC_ACT_SHOT;

	if (fib_redirect && ip6->hop_limit > 1) {
		p.family = AF_INET6;
		p.flowinfo = *(__be32 *)ip6 & bpf_htonl(0x0fffffff);
		p.l4_protocol = ip6->nexthdr;
		addr6_set(p.ipv6_src, to->saddr);
		addr6_set(p.ipv6_dst, to->daddr);
		p.ifindex = skb->ingress_ifindex;
		rc = bpf_fib_lookup(skb, &p, sizeof(p), 0);
		if (rc == BPF_FIB_LKUP_RET_BLACKHOLE || rc == BPF_FIB_LKUP_RET_UNREACHABLE ||
		    rc == BPF_FIB_LKUP_RET_PROHIBIT) {
			STAT_INC(drop_fib);
			return TC_ACT_SHOT;
		}
		redirect = rc == BPF_FIB_LKUP_RET_SUCCESS || rc == BPF_FIB_LKUP_RET_NO_NEIGH;
		data = pkt_data(skb);
		end = pkt_end(skb);
		ip6 = data + IP6_OFF;
		if ((void *)(ip6 + 1) > end)
			return TC_ACT_SHOT;
	}
	if (fib_redirect && !redirect)
		STAT_INC(passed_to_stack);

	__u32 addr_diff = 0;
	bool addrs = false;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		addr_diff = csum_add(addr_diff, csum_add(~old->saddr[i], to->saddr[i]));
		addr_diff = csum_add(addr_diff, csum_add(~old->daddr[i], to->daddr[i]));
		addrs |= old->saddr[i] != to->saddr[i] || old->daddr[i] != to->daddr[i];
	}
	addr6_set(ip6->saddr.in6_u.u6_addr32, to->saddr);
	addr6_set(ip6->daddr.in6_u.u6_addr32, to->daddr);
	if (redirect) {
		ip6->hop_limit--;
		if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
			struct ethhdr *eth = data;
			__builtin_memcpy(eth->h_dest, p.dmac, ETH_ALEN);
			__builtin_memcpy(eth->h_source, p.smac, ETH_ALEN);
		}
	}

	if (l4proto) {
		// ICMPv6 has a pseudo header too (and no ports to change).
		__u32 csum_off = L4_OFF6 + (l4proto == IPPROTO_TCP ? offsetof(struct tcphdr, check)
					    : l4proto == IPPROTO_UDP ? offsetof(struct udphdr, check)
								     : offsetof(struct icmphdr, checksum));
		// A zero UDP checksum is invalid in IPv6; nothing to preserve.
		__u32 port_diff = 0;
		bool ports_changed = false;
		if (l4proto != IPPROTO_ICMPV6) {
			__be16 *ports = data + L4_OFF6;
			if ((void *)(ports + 2) > end)
				return TC_ACT_SHOT;
			ports_changed = ports[0] != to->sport || ports[1] != to->dport;
			if (ports_changed) {
				port_diff = csum_add(csum_add(~(__u32)ports[0] & 0xffff, to->sport),
						     csum_add(~(__u32)ports[1] & 0xffff, to->dport));
				ports[0] = to->sport;
				ports[1] = to->dport;
			}
		}
		if (addrs && bpf_l4_csum_replace(skb, csum_off, 0, addr_diff, BPF_F_PSEUDO_HDR))
			return TC_ACT_SHOT;
		if (ports_changed && bpf_l4_csum_replace(skb, csum_off, 0, port_diff, 0))
			return TC_ACT_SHOT;
	}

	if (!redirect)
		return TC_ACT_OK;
	if (rc == BPF_FIB_LKUP_RET_NO_NEIGH) {
		STAT_INC(neigh_redirects);
		struct bpf_redir_neigh nh = { .nh_family = AF_INET6 };
		addr6_set(nh.ipv6_nh, p.ipv6_dst);
		return bpf_redirect_neigh(p.ifindex, &nh, sizeof(nh), 0);
	}
	__u32 out = p.ifindex;
	if (bpf_map_lookup_elem(&peer_ifaces, &out))
		return bpf_redirect_peer(out, 0);
	return bpf_redirect(out, 0);
}

#define ICMPV6_DEST_UNREACH 1
#define ICMPV6_PARAMPROB 4 // 2 packet too big and 3 time exceeded lie between

// Header of the packet quoted inside an ICMPv6 error: IPv6 without
// extension headers and the first 8 bytes of TCP/UDP.
struct quoted6 {
	struct ipv6hdr ip;
	__be16 sport;
	__be16 dport;
	__be32 rest;
};

// handle_icmp for IPv6: Packet Too Big matters most here, since IPv6
// routers never fragment and path MTU discovery depends on it reaching the
// socket that sent the packet.
static __noinline int handle_icmp6(struct __sk_buff *skb)
{
	struct icmphdr ic; // ICMPv6 shares the first 8 bytes' layout
	struct quoted6 q;
	struct flow6 outer = { .proto = IPPROTO_ICMPV6 };
	// The session key, then (no longer needed) the outer rewrite: one slot
	// of stack for both keeps this call chain within the 512-byte limit.
	union {
		struct flow6 k;
		struct session6 to;
	} u = {};

	// saddr and daddr are adjacent in both the header and struct flow6.
	if (bpf_skb_load_bytes(skb, IP6_OFF + offsetof(struct ipv6hdr, saddr), outer.saddr, 32) ||
	    bpf_skb_load_bytes(skb, L4_OFF6, &ic, sizeof(ic)))
		return TC_ACT_UNSPEC;
	if (ic.type < ICMPV6_DEST_UNREACH || ic.type > ICMPV6_PARAMPROB)
		return TC_ACT_UNSPEC;
	__u32 qoff = L4_OFF6 + sizeof(ic);
	if (bpf_skb_load_bytes(skb, qoff, &q, sizeof(q)))
		return TC_ACT_UNSPEC;
	if (q.ip.nexthdr != IPPROTO_TCP && q.ip.nexthdr != IPPROTO_UDP)
		return TC_ACT_UNSPEC;

	// The quoted packet went the other way, so its reverse is a session key.
	u.k.sport = q.dport;
	u.k.dport = q.sport;
	u.k.proto = q.ip.nexthdr;
	addr6_set(u.k.saddr, q.ip.daddr.in6_u.u6_addr32);
	addr6_set(u.k.daddr, q.ip.saddr.in6_u.u6_addr32);
	struct session6 *s = bpf_map_lookup_elem(&sessions6, &u.k);
	if (!s)
		return TC_ACT_UNSPEC;

	// Rewrite the quoted header; ICMPv6's checksum covers it, so add the
	// same ones' complement diff there.
	bool from_quoted_dst = addr6_eq(outer.saddr, q.ip.daddr.in6_u.u6_addr32);
	__u32 diff = 0;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		diff = csum_add(diff, csum_add(~q.ip.saddr.in6_u.u6_addr32[i], s->daddr[i]));
		diff = csum_add(diff, csum_add(~q.ip.daddr.in6_u.u6_addr32[i], s->saddr[i]));
	}
	diff = csum_add(diff, csum_add(~(__u32)q.sport & 0xffff, s->dport));
	diff = csum_add(diff, csum_add(~(__u32)q.dport & 0xffff, s->sport));
	addr6_set(q.ip.saddr.in6_u.u6_addr32, s->daddr);
	addr6_set(q.ip.daddr.in6_u.u6_addr32, s->saddr);
	q.sport = s->dport;
	q.dport = s->sport;
	if (bpf_l4_csum_replace(skb, L4_OFF6 + offsetof(struct icmphdr, checksum), 0, diff, 0) ||
	    bpf_skb_store_bytes(skb, qoff, &q, sizeof(q), 0))
		return TC_ACT_SHOT;

	__builtin_memset(&u, 0, sizeof(u));
	if (from_quoted_dst)
		addr6_set(u.to.saddr, q.ip.daddr.in6_u.u6_addr32);
	else
		addr6_set(u.to.saddr, outer.saddr);
	addr6_set(u.to.daddr, q.ip.saddr.in6_u.u6_addr32);
	STAT_INC(icmp_translated);
	return translate6(skb, IPPROTO_ICMPV6, &outer, &u.to);
}

static __noinline int lb_ingress6(struct __sk_buff *skb)
{
	if (pull(skb, L4_OFF6))
		return TC_ACT_UNSPEC;
	void *data = pkt_data(skb), *end = pkt_end(skb);
	struct ipv6hdr *ip6 = data + IP6_OFF;
	if ((void *)(ip6 + 1) > end)
		return TC_ACT_UNSPEC;
	__u8 proto = ip6->nexthdr;
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return TC_ACT_UNSPEC;

	struct flow6 f = { .proto = proto };
	addr6_set(f.saddr, ip6->saddr.in6_u.u6_addr32);
	addr6_set(f.daddr, ip6->daddr.in6_u.u6_addr32);

	if (pull(skb, L4_OFF6 + (proto == IPPROTO_TCP ? sizeof(struct tcphdr) : sizeof(struct udphdr))))
		return TC_ACT_UNSPEC;
	data = pkt_data(skb);
	end = pkt_end(skb);
	__u8 *l4 = data + L4_OFF6;
	if ((void *)(l4 + sizeof(struct udphdr)) > end)
		return TC_ACT_UNSPEC;
	f.sport = ((__be16 *)l4)[0];
	f.dport = ((__be16 *)l4)[1];
	__u8 tcp_flags = 0;
	if (proto == IPPROTO_TCP) {
		if ((void *)(l4 + sizeof(struct tcphdr)) > end)
			return TC_ACT_UNSPEC;
		tcp_flags = l4[13];
	}

	struct session6 s;
	struct session6 *cur = bpf_map_lookup_elem(&sessions6, &f);
	if (cur && !(cur->flags & SESS_F_REPLY)) {
		bool syn = (tcp_flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) == TCP_FLAG_SYN;
		bool reopen = syn && (cur->flags & SESS_F_CLOSING);
		bool gone = (proto == IPPROTO_UDP || syn) && !backend_alive6(cur);
		if (gone || reopen) {
			if (gone)
				STAT_INC(stale_backend);
			s = *cur;
			delete_pair6(&f, &s);
			cur = NULL;
		}
	}
	if (cur) {
		__u64 now = bpf_ktime_get_ns();
		if (now - cur->last_seen > last_seen_grain_ns)
			cur->last_seen = now;
		if ((tcp_flags & (TCP_FLAG_FIN | TCP_FLAG_RST)) && !(cur->flags & SESS_F_CLOSING))
			cur->flags |= SESS_F_CLOSING;
		s = *cur;
	} else {
		struct svc_key6 k = { .port = f.dport, .proto = proto };
		addr6_set(k.addr, f.daddr);
		struct svc_val6 *svc = bpf_map_lookup_elem(&services6, &k);
		if (!svc)
			return TC_ACT_UNSPEC;
		if (create_session6(&f, svc, &s))
			return TC_ACT_SHOT;
	}

	struct lb_stats *st = lookup_stats();
	if (st) {
		if (s.flags & SESS_F_REPLY)
			st->reply_packets++;
		else
			st->fwd_packets++;
	}
	return translate6(skb, proto, &f, &s);
}

#endif

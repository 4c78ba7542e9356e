// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Stats are the program's counters summed over CPUs (struct lb_stats).
type Stats struct {
	FwdPackets, ReplyPackets        uint64
	ICMPTranslated, FragTranslated  uint64
	SessionsCreated, SNATAllocation uint64
	StaleBackend, PassedToStack     uint64
	AffinityHits                    uint64            // new connections sent to the client's remembered backend
	NeighRedirects                  uint64            // packets sent via bpf_redirect_neigh (no neighbour entry yet)
	Drops                           map[string]uint64 // by reason
	PortTries                       [SNATTries]uint64 // [i]: allocations that took i+1 tries
	PortFailures                    uint64            // allocations that found no port in SNATTries
}

// DropReasons lists the keys of Stats.Drops, in a stable order.
var DropReasons = []string{"no_backend", "no_port", "session_map", "frag", "fib"}

// Stats reads and sums the per-CPU counters.
func (d *Datapath) Stats() (Stats, error) {
	var per []lbLbStats
	if err := d.objs.Stats.Lookup(uint32(0), &per); err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	var t lbLbStats
	for _, c := range per {
		t.FwdPackets += c.FwdPackets
		t.ReplyPackets += c.ReplyPackets
		t.IcmpTranslated += c.IcmpTranslated
		t.FragTranslated += c.FragTranslated
		t.SessionsCreated += c.SessionsCreated
		t.SnatAllocations += c.SnatAllocations
		t.StaleBackend += c.StaleBackend
		t.AffinityHits += c.AffinityHits
		t.NeighRedirects += c.NeighRedirects
		t.PassedToStack += c.PassedToStack
		t.DropNoBackend += c.DropNoBackend
		t.DropNoPort += c.DropNoPort
		t.DropSessionMap += c.DropSessionMap
		t.DropFrag += c.DropFrag
		t.DropFib += c.DropFib
	}
	s := Stats{
		FwdPackets: t.FwdPackets, ReplyPackets: t.ReplyPackets,
		ICMPTranslated: t.IcmpTranslated, FragTranslated: t.FragTranslated,
		SessionsCreated: t.SessionsCreated, SNATAllocation: t.SnatAllocations,
		StaleBackend: t.StaleBackend, PassedToStack: t.PassedToStack,
		AffinityHits: t.AffinityHits, NeighRedirects: t.NeighRedirects,
		Drops: map[string]uint64{
			"no_backend":  t.DropNoBackend,
			"no_port":     t.DropNoPort,
			"session_map": t.DropSessionMap,
			"frag":        t.DropFrag,
			"fib":         t.DropFib,
		},
	}
	for i := uint32(0); i <= SNATTries; i++ {
		var per []uint64
		if err := d.objs.PortTries.Lookup(i, &per); err != nil {
			return Stats{}, fmt.Errorf("read port_tries[%d]: %w", i, err)
		}
		var n uint64
		for _, v := range per {
			n += v
		}
		if i < SNATTries {
			s.PortTries[i] = n
		} else {
			s.PortFailures = n
		}
	}
	return s, nil
}

// Flow is a 5-tuple as the program sees it.
type Flow struct {
	Src, Dst netip.AddrPort
	Proto    Proto
}

func (f Flow) key() lbFlow {
	return lbFlow{
		Saddr: addrBE(f.Src.Addr()), Daddr: addrBE(f.Dst.Addr()),
		Sport: portBE(f.Src.Port()), Dport: portBE(f.Dst.Port()), Proto: uint8(f.Proto),
	}
}

func flowFromKey(k lbFlow) Flow {
	return Flow{
		Src:   netip.AddrPortFrom(addrFromBE(k.Saddr), portFromBE(k.Sport)),
		Dst:   netip.AddrPortFrom(addrFromBE(k.Daddr), portFromBE(k.Dport)),
		Proto: Proto(k.Proto),
	}
}

// Session is one direction of a translated connection.
type Session struct {
	Key       Flow // tuple of packets it matches
	To        Flow // tuple it rewrites them to
	BackendID uint32
	LastSeen  time.Duration // CLOCK_MONOTONIC
	Reply     bool
	SNAT      bool
	Closing   bool
}

func sessionFrom(k lbFlow, v lbSession) Session {
	return Session{
		Key: flowFromKey(k),
		To: Flow{
			Src:   netip.AddrPortFrom(addrFromBE(v.Saddr), portFromBE(v.Sport)),
			Dst:   netip.AddrPortFrom(addrFromBE(v.Daddr), portFromBE(v.Dport)),
			Proto: Proto(k.Proto),
		},
		BackendID: v.BackendId,
		LastSeen:  time.Duration(v.LastSeen),
		Reply:     v.Flags&1 != 0,
		SNAT:      v.Flags&2 != 0,
		Closing:   v.Flags&4 != 0,
	}
}

// Sessions returns every session entry (both directions, both families).
func (d *Datapath) Sessions() ([]Session, error) {
	var out []Session
	if err := readAll(d.objs.Sessions, 0, func(k lbFlow, v lbSession) { out = append(out, sessionFrom(k, v)) }); err != nil {
		return nil, fmt.Errorf("read sessions: %w", err)
	}
	if err := readAll(d.objs.Sessions6, 0, func(k lbFlow6, v lbSession6) { out = append(out, sessionFrom6(k, v)) }); err != nil {
		return nil, fmt.Errorf("read IPv6 sessions: %w", err)
	}
	return out, nil
}

// readAll reads every entry of m in batches (one system call per few
// thousand entries instead of two per entry: a sweep of a full session map
// would otherwise take a CPU for a good part of a second), pausing between
// batches, and falls back to iteration where the kernel has no batch lookup
// for the map type.
func readAll[K, V any](m *ebpf.Map, pause time.Duration, each func(K, V)) error {
	const chunk = 4096
	keys, vals := make([]K, chunk), make([]V, chunk)
	var cursor ebpf.MapBatchCursor
	for first := true; ; first = false {
		if !first {
			time.Sleep(pause)
		}
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := range n {
			each(keys[i], vals[i])
		}
		switch {
		case errors.Is(err, ebpf.ErrKeyNotExist):
			return nil
		case first && errors.Is(err, ebpf.ErrNotSupported):
			var k K
			var v V
			it := m.Iterate()
			for it.Next(&k, &v) {
				each(k, v)
			}
			return it.Err()
		case err != nil:
			return err
		}
	}
}

// PutSession inserts a raw entry; tests use it to pre-fill the port space.
func (d *Datapath) PutSession(s Session) error {
	v := lbSession{
		Saddr: addrBE(s.To.Src.Addr()), Daddr: addrBE(s.To.Dst.Addr()),
		Sport: portBE(s.To.Src.Port()), Dport: portBE(s.To.Dst.Port()),
		BackendId: s.BackendID, LastSeen: uint64(s.LastSeen),
	}
	if s.Reply {
		v.Flags |= 1
	}
	if s.SNAT {
		v.Flags |= 2
	}
	if s.Closing {
		v.Flags |= 4
	}
	return d.objs.Sessions.Put(s.Key.key(), v)
}

// DeleteSession removes one entry; missing entries are not an error.
func (d *Datapath) DeleteSession(f Flow) error {
	var err error
	if f.Src.Addr().Is4() {
		err = d.objs.Sessions.Delete(f.key())
	} else {
		err = d.objs.Sessions6.Delete(f.key6())
	}
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// Timeouts say how long an idle connection keeps its sessions.
type Timeouts struct {
	TCP, UDP, Closing time.Duration
}

// Monotonic is the clock bpf_ktime_get_ns() reads.
func Monotonic() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// Sweep removes idle connections, forward and reply entry together, and reply
// entries whose forward entry is gone (LRU eviction, lost creation races).
// It returns the number of live connections and of entries removed.
//
// It reads the maps' raw entries (small, pointer-free values) in batches and
// decides from that snapshot; the program's sweep_delete then deletes each
// pick only if its entries still carry the last_seen read, so a connection
// that sent a packet or was reopened on the same tuple meanwhile keeps its
// session (deleting by key alone lost such connections to RTO timeouts in
// bench-lb). Reads and deletes go in batches with sweepPause between them:
// converting every entry to a Session and deleting one per system call took
// a CPU for a quarter of a second per 80,000 entries in one go
// (BenchmarkSweep), which on the CPU that also carries the node's packets and
// backends showed as a 10-30 ms p99; in slices of a millisecond or two other
// threads get the CPU in between.
func (d *Datapath) Sweep(now time.Duration, t Timeouts) (live, removed int, err error) {
	live4, gone4, err4 := sweepMap(d.objs.Sessions, now, t,
		func(k lbFlow, v lbSession) lbFlow {
			return lbFlow{Saddr: v.Daddr, Daddr: v.Saddr, Sport: v.Dport, Dport: v.Sport, Proto: k.Proto}
		},
		func(k lbFlow, v lbSession) (uint8, uint64, uint32) { return k.Proto, v.LastSeen, v.Flags },
		func(k lbFlow, seen uint64, pair lbFlow, pairSeen uint64, hasPair bool) lbSweepItem {
			return lbSweepItem{Key: k, Seen: seen, Pair: pair, PairSeen: pairSeen, HasPair: b2u(hasPair)}
		})
	live6, gone6, err6 := sweepMap(d.objs.Sessions6, now, t,
		func(k lbFlow6, v lbSession6) lbFlow6 {
			return lbFlow6{Saddr: v.Daddr, Daddr: v.Saddr, Sport: v.Dport, Dport: v.Sport, Proto: k.Proto}
		},
		func(k lbFlow6, v lbSession6) (uint8, uint64, uint32) { return k.Proto, v.LastSeen, v.Flags },
		func(k lbFlow6, seen uint64, pair lbFlow6, pairSeen uint64, hasPair bool) lbSweepItem6 {
			return lbSweepItem6{Key: k, Seen: seen, Pair: pair, PairSeen: pairSeen, HasPair: b2u(hasPair)}
		})
	if err = errors.Join(err4, err6); err != nil {
		return 0, 0, err
	}
	if d.afterSweepRead != nil {
		d.afterSweepRead()
	}
	n4, err4 := deleteChecked(d.objs.SweepDelete, d.objs.SweepBatch, 4, gone4, sweepPause)
	n6, err6 := deleteChecked(d.objs.SweepDelete, d.objs.SweepBatch6, 6, gone6, sweepPause)
	return live4 + live6, n4 + n6, errors.Join(err4, err6)
}

// sweepPause is Sweep's pause between batches of a system call each.
const sweepPause = time.Millisecond

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// sweepMap finds what Sweep removes in one family's session map. other(k, v)
// is the key of the other direction's entry (the rewritten tuple reversed);
// meta gives an entry's protocol, last_seen and flags; item makes one pick
// for sweep_delete: an entry, its last_seen, and its pair's if it has one.
func sweepMap[K comparable, V, I any](m *ebpf.Map, now time.Duration, t Timeouts,
	other func(K, V) K, meta func(K, V) (proto uint8, lastSeen uint64, flags uint32),
	item func(k K, seen uint64, pair K, pairSeen uint64, hasPair bool) I) (live int, gone []I, err error) {
	entries := map[K]V{}
	if err := readAll(m, sweepPause, func(k K, v V) { entries[k] = v }); err != nil {
		return 0, nil, fmt.Errorf("read sessions: %w", err)
	}
	var none K
	for k, v := range entries {
		proto, last, flags := meta(k, v)
		if flags&1 != 0 { // reply
			// The program inserts the reply entry just before the forward
			// one: only orphans older than the closing grace are garbage.
			fk := other(k, v)
			fwd, ok := entries[fk]
			if (!ok || other(fk, fwd) != k) && now-time.Duration(last) > t.Closing+LastSeenGrain {
				gone = append(gone, item(k, last, none, 0, false))
			}
			continue
		}
		seen := last
		rk := other(k, v)
		rev, ok := entries[rk]
		closing := flags&4 != 0
		var rlast uint64
		if ok {
			var rflags uint32
			_, rlast, rflags = meta(rk, rev)
			last = max(last, rlast)
			closing = closing || rflags&4 != 0
		}
		idle := t.UDP
		if Proto(proto) == TCP {
			idle = t.TCP
			if closing {
				idle = t.Closing
			}
		}
		if now-time.Duration(last) > idle+LastSeenGrain { // last_seen lags by up to the grain
			gone = append(gone, item(k, seen, rk, rlast, ok))
			continue
		}
		live++
	}
	return live, gone, nil
}

// deleteChecked hands items to the program's sweep_delete, a batch array's
// capacity (SWEEP_BATCH) at a time and pause apart, through the family's batch array, and returns how
// many entries it deleted.
func deleteChecked[I any](prog *ebpf.Program, batch *ebpf.Map, family uint32, items []I, pause time.Duration) (int, error) {
	idx := make([]uint32, batch.MaxEntries())
	for i := range idx {
		idx[i] = uint32(i)
	}
	deleted := 0
	for first := true; len(items) > 0; first = false {
		if !first {
			time.Sleep(pause)
		}
		n := min(len(idx), len(items))
		if _, err := batch.BatchUpdate(idx[:n], items[:n], nil); err != nil {
			return deleted, fmt.Errorf("sweep: fill batch: %w", err)
		}
		args := lbSweepArgs{Family: family, Count: uint32(n)}
		ret, err := prog.Run(&ebpf.RunOptions{Context: args, ContextOut: &args})
		if err != nil {
			return deleted, fmt.Errorf("sweep: run sweep_delete: %w", err)
		}
		if ret != 0 {
			return deleted, fmt.Errorf("sweep: sweep_delete returned %d", int32(ret))
		}
		deleted += int(args.Deleted)
		items = items[n:]
	}
	return deleted, nil
}

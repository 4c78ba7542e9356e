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
	if err := readAll(d.objs.Sessions, func(k lbFlow, v lbSession) { out = append(out, sessionFrom(k, v)) }); err != nil {
		return nil, fmt.Errorf("read sessions: %w", err)
	}
	if err := readAll(d.objs.Sessions6, func(k lbFlow6, v lbSession6) { out = append(out, sessionFrom6(k, v)) }); err != nil {
		return nil, fmt.Errorf("read IPv6 sessions: %w", err)
	}
	return out, nil
}

// readAll reads every entry of m in batches (one system call per few
// thousand entries instead of two per entry: a sweep of a full session map
// would otherwise take a CPU for a good part of a second), and falls back to
// iteration where the kernel has no batch lookup for the map type.
func readAll[K, V any](m *ebpf.Map, each func(K, V)) error {
	const chunk = 4096
	keys, vals := make([]K, chunk), make([]V, chunk)
	var cursor ebpf.MapBatchCursor
	for first := true; ; first = false {
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
func (d *Datapath) Sweep(now time.Duration, t Timeouts) (live, removed int, err error) {
	all, err := d.Sessions()
	if err != nil {
		return 0, 0, err
	}
	byKey := make(map[Flow]Session, len(all))
	for _, s := range all {
		byKey[s.Key] = s
	}
	replyOf := func(fwd Session) Flow {
		return Flow{Src: fwd.To.Dst, Dst: fwd.To.Src, Proto: fwd.Key.Proto}
	}
	forwardOf := func(rev Session) Flow {
		return Flow{Src: rev.To.Dst, Dst: rev.To.Src, Proto: rev.Key.Proto}
	}
	del := func(f Flow) {
		if e := d.DeleteSession(f); e != nil && err == nil {
			err = e
		}
		removed++
	}
	for _, s := range all {
		if s.Reply {
			// The program inserts the reply entry just before the forward
			// one: only orphans older than the closing grace are garbage.
			fwd, ok := byKey[forwardOf(s)]
			if (!ok || replyOf(fwd) != s.Key) && now-s.LastSeen > t.Closing+LastSeenGrain {
				del(s.Key)
			}
			continue
		}
		rk := replyOf(s)
		rev, ok := byKey[rk]
		last, closing := s.LastSeen, s.Closing
		if ok {
			last = max(last, rev.LastSeen)
			closing = closing || rev.Closing
		}
		idle := t.UDP
		if s.Key.Proto == TCP {
			idle = t.TCP
			if closing {
				idle = t.Closing
			}
		}
		if now-last > idle+LastSeenGrain { // last_seen lags by up to the grain
			del(s.Key)
			if ok {
				del(rk)
			}
			continue
		}
		live++
	}
	return live, removed, err
}

// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/swiftlane/swiftlane/internal/percpu"
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
	// The node's own sockets: connects and unconnected UDP datagrams sent
	// to a backend instead of a frontend, and both refused.
	HostConnects, HostDatagrams, HostRefused uint64
}

// DropReasons lists the keys of Stats.Drops, in a stable order.
var DropReasons = []string{"no_backend", "no_port", "session_map", "frag", "fib", "source_range"}

// Stats reads and sums the per-CPU counters.
func (d *Datapath) Stats() (Stats, error) {
	t, err := percpu.Sum[lbLbStats](d.objs.Stats, uint32(0))
	if err != nil {
		return Stats{}, fmt.Errorf("read stats: %w", err)
	}
	s := Stats{
		FwdPackets: t.FwdPackets, ReplyPackets: t.ReplyPackets,
		ICMPTranslated: t.IcmpTranslated, FragTranslated: t.FragTranslated,
		SessionsCreated: t.SessionsCreated, SNATAllocation: t.SnatAllocations,
		StaleBackend: t.StaleBackend, PassedToStack: t.PassedToStack,
		AffinityHits: t.AffinityHits, NeighRedirects: t.NeighRedirects,
		HostConnects: t.HostConnects, HostDatagrams: t.HostDatagrams, HostRefused: t.HostRefused,
		Drops: map[string]uint64{
			"no_backend":   t.DropNoBackend,
			"no_port":      t.DropNoPort,
			"session_map":  t.DropSessionMap,
			"frag":         t.DropFrag,
			"fib":          t.DropFib,
			"source_range": t.DropSourceRange,
		},
	}
	for i := uint32(0); i <= SNATTries; i++ {
		n, err := percpu.Sum[uint64](d.objs.PortTries, i)
		if err != nil {
			return Stats{}, fmt.Errorf("read port_tries[%d]: %w", i, err)
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

// Sessions returns every session entry (both directions, both families).
func (d *Datapath) Sessions() ([]Session, error) {
	var out []Session
	if err := errors.Join(d.v4().readSessions(&out), d.v6().readSessions(&out)); err != nil {
		return nil, err
	}
	return out, nil
}

// readChunk is how many entries one batch lookup reads. A system call is not
// preempted (the common server kernels preempt only at its end), so it is as
// long as the longest stall it can give a backend that wakes on the sweep's
// CPU: 4,096 entries took about 1 ms (BenchmarkSweepCall), 512 take about
// 0.15 ms and cost no more CPU per entry.
const readChunk = 512

// readAll reads every entry of m in batches of readChunk (two system calls
// per entry would take a CPU for a good part of a second on a full session
// map), pausing between batches, and falls back to iteration where the
// kernel has no batch lookup for the map type.
func readAll[K, V any](m *ebpf.Map, pause time.Duration, each func(K, V)) error {
	keys, vals := make([]K, readChunk), make([]V, readChunk)
	var cursor ebpf.MapBatchCursor
	for first := true; ; first = false {
		if !first {
			sleepThread(pause)
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
	if s.Key.Src.Addr().Is4() {
		return d.v4().putSession(s)
	}
	return d.v6().putSession(s)
}

// DeleteSession removes one entry; missing entries are not an error.
func (d *Datapath) DeleteSession(f Flow) error {
	if f.Src.Addr().Is4() {
		return d.v4().deleteSession(f)
	}
	return d.v6().deleteSession(f)
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
// User space only reads: the maps' raw entries (small, pointer-free values)
// in batches, keeping the keys of entries whose own last_seen is old enough
// for the shortest timeout. The program's sweep_delete judges those against
// the entries as they are then, with their partners, and deletes: a
// connection that sent a packet or was reopened on the same tuple since the
// read keeps its session (deletes decided from the snapshot lost such
// connections to RTO timeouts in bench-lb). Reads and deletes go in batches
// with sweepPause between them: one system call per deleted entry, all at
// once, took a CPU for a quarter of a second per 80,000 entries; on the CPU
// that also carries the node's packets and backends that showed as a 10-30
// ms p99 in bench-lb. Each call now lasts a fraction of a millisecond
// (readChunk, SWEEP_BATCH) and other threads get the CPU in between.
func (d *Datapath) Sweep(now time.Duration, t Timeouts) (live, removed int, err error) {
	args := lbSweepArgs{
		Now:         uint64(now),
		TcpIdle:     uint64(t.TCP + LastSeenGrain), // last_seen lags by up to the grain
		UdpIdle:     uint64(t.UDP + LastSeenGrain),
		ClosingIdle: uint64(t.Closing + LastSeenGrain),
	}
	// An entry newer than this is live whatever its partner says.
	oldest := now - min(t.TCP, t.UDP, t.Closing) - LastSeenGrain
	v4, v6 := d.v4(), d.v6()
	fwd4, keys4, err4 := v4.sweepCandidates(oldest)
	fwd6, keys6, err6 := v6.sweepCandidates(oldest)
	if err = errors.Join(err4, err6); err != nil {
		return 0, 0, err
	}
	if d.afterSweepRead != nil {
		d.afterSweepRead()
	}
	n4, c4, err4 := sweepDelete(d.objs.SweepDelete, v4.sweepBatch, v4.number, args, keys4, sweepPause)
	n6, c6, err6 := sweepDelete(d.objs.SweepDelete, v6.sweepBatch, v6.number, args, keys6, sweepPause)
	return fwd4 + fwd6 - c4 - c6, n4 + n6, errors.Join(err4, err6)
}

// sweepPause is Sweep's pause between batches of a system call each: longer
// than a call, so the sweep takes at most about a third of its CPU even
// where nothing else runs, short enough that a sweep of a full map (a few
// thousand calls) ends within a sweep interval.
const sweepPause = 250 * time.Microsecond

// sleepThread blocks the calling thread for d in the kernel. time.Sleep parks
// the goroutine on a runtime timer, which the netpoller rounds up to a
// millisecond and which costs tens of µs of runtime work per pause: with a
// pause per batch that was a third of the sweep's CPU.
func sleepThread(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}

// sweepDelete hands keys to the program's sweep_delete, a batch array's
// capacity (SWEEP_BATCH) at a time and pause apart, and returns how many
// entries it deleted and how many of them were connections' forward entries.
func sweepDelete[K any](prog *ebpf.Program, batch *ebpf.Map, family uint32, args lbSweepArgs, keys []K, pause time.Duration) (deleted, conns int, err error) {
	idx := make([]uint32, batch.MaxEntries())
	for i := range idx {
		idx[i] = uint32(i)
	}
	for first := true; len(keys) > 0; first = false {
		if !first {
			sleepThread(pause)
		}
		n := min(len(idx), len(keys))
		if _, err := batch.BatchUpdate(idx[:n], keys[:n], nil); err != nil {
			return deleted, conns, fmt.Errorf("sweep: fill batch: %w", err)
		}
		a := args
		a.Family, a.Count = family, uint32(n)
		ret, err := prog.Run(&ebpf.RunOptions{Context: a, ContextOut: &a})
		if err != nil {
			return deleted, conns, fmt.Errorf("sweep: run sweep_delete: %w", err)
		}
		if ret != 0 {
			return deleted, conns, fmt.Errorf("sweep: sweep_delete returned %d", int32(ret))
		}
		deleted += int(a.Deleted)
		conns += int(a.Conns)
		keys = keys[n:]
	}
	return deleted, conns, nil
}

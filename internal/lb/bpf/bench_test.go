// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// BenchmarkEstablishedPacket is the program's cost for one packet of an
// established ClusterIP connection (session hit, DNAT of address and port),
// measured in the kernel with BPF_PROG_TEST_RUN. FIB redirect is off, so it
// covers parsing, the session lookup and the rewrite, not the route lookup.
func BenchmarkEstablishedPacket(b *testing.B) {
	d := load(b, testConstants())
	fe := Frontend{vip, 80, TCP}
	if err := d.PutBackend(1, ap(backendA, 8080)); err != nil {
		b.Fatal(err)
	}
	if err := d.PutService(fe, ServiceEntry{ID: 1, Slots: []uint32{1}}, ServiceEntry{}); err != nil {
		b.Fatal(err)
	}
	syn := pkt{src: ap(client, 40000), dst: ap(vip, 80), proto: TCP, tcpFlags: 0x02, payload: make([]byte, 64)}
	if ret, _, err := d.Program().Benchmark(syn.bytes(), 1, nil); err != nil || ret != actOK {
		b.Fatalf("session setup: verdict %d, %v", ret, err)
	}
	// Repeated runs reuse one skb, which the first run rewrites: a mirror
	// session maps the rewritten tuple back, so every run is a session hit
	// and a full rewrite (address, port, both checksums).
	mirror := lbFlow{Saddr: addrBE(client), Daddr: addrBE(backendA), Sport: portBE(40000), Dport: portBE(8080), Proto: 6}
	back := lbSession{Saddr: addrBE(client), Daddr: addrBE(vip), Sport: portBE(40000), Dport: portBE(80), BackendId: 1}
	if err := d.objs.Sessions.Put(mirror, back); err != nil {
		b.Fatal(err)
	}
	ack := syn
	ack.tcpFlags = 0x10
	in := ack.bytes()
	b.ResetTimer()
	ret, per, err := d.Program().Benchmark(in, b.N, b.ResetTimer)
	if err != nil || ret != actOK {
		b.Fatalf("verdict %d, %v", ret, err)
	}
	b.ReportMetric(float64(per.Nanoseconds()), "ns/packet")
}

// BenchmarkSweep is one Sweep of a session map holding 40,000 idle
// connections (a forward and a reply entry each): about what three seconds
// of the benchmark's connection-rate phase leave behind.
func BenchmarkSweep(b *testing.B) {
	d := load(b, testConstants())
	const conns = 40000
	t := Timeouts{TCP: time.Second, UDP: time.Second, Closing: time.Second}
	// Wall time includes the pauses between batches; the CPU it takes from
	// the node's packets and backends is the process's CPU time.
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		fillIdle(b, d, conns)
		b.StartTimer()
		before := processCPU(b)
		live, removed, err := d.Sweep(time.Hour, t)
		cpu += processCPU(b) - before
		if err != nil || live != 0 || removed != 2*conns {
			b.Fatalf("Sweep: %d live, %d removed, %v; want 0, %d", live, removed, err, 2*conns)
		}
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// BenchmarkSweepCall reports how long a sweep's system calls over the same
// map last (median and 99th percentile): a batch lookup of readChunk entries
// and a sweep_delete run of SWEEP_BATCH keys. Nothing preempts a system call,
// so on the CPU that also runs the node's packets and backends this is how
// long the sweep can hold a woken backend back.
func BenchmarkSweepCall(b *testing.B) {
	d := load(b, testConstants())
	const conns = 40000
	args := lbSweepArgs{Now: uint64(time.Hour), TcpIdle: 1, UdpIdle: 1, ClosingIdle: 1, Family: 4}
	idx := make([]uint32, d.objs.SweepBatch.MaxEntries())
	for i := range idx {
		idx[i] = uint32(i)
	}
	var read, del []time.Duration
	for b.Loop() {
		b.StopTimer()
		fillIdle(b, d, conns)
		b.StartTimer()
		keys, vals := make([]lbFlow, readChunk), make([]lbSession, readChunk)
		var all []lbFlow
		var cursor ebpf.MapBatchCursor
		for {
			start := time.Now()
			n, err := d.objs.Sessions.BatchLookup(&cursor, keys, vals, nil)
			read = append(read, time.Since(start))
			all = append(all, keys[:n]...)
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
		for len(all) > 0 {
			n := min(len(idx), len(all))
			if _, err := d.objs.SweepBatch.BatchUpdate(idx[:n], all[:n], nil); err != nil {
				b.Fatal(err)
			}
			a := args
			a.Count = uint32(n)
			start := time.Now()
			if _, err := d.objs.SweepDelete.Run(&ebpf.RunOptions{Context: a, ContextOut: &a}); err != nil {
				b.Fatal(err)
			}
			del = append(del, time.Since(start))
			all = all[n:]
		}
	}
	for _, c := range []struct {
		name  string
		calls []time.Duration
	}{{"read", read}, {"delete", del}} {
		slices.Sort(c.calls)
		b.ReportMetric(float64(c.calls[len(c.calls)/2].Microseconds()), c.name+"-p50-µs")
		b.ReportMetric(float64(c.calls[len(c.calls)*99/100].Microseconds()), c.name+"-p99-µs")
	}
}

// fillIdle puts conns idle TCP connections into the session map, a forward
// and a reply entry each, last seen at 1 ns after boot.
func fillIdle(b *testing.B, d *Datapath, conns int) {
	for i := range conns {
		port := uint16(1024 + i%60000)
		cl := netip.AddrFrom4([4]byte{10, 1, byte(i >> 16), byte(i >> 8)})
		fwd := Flow{Src: netip.AddrPortFrom(cl, port), Dst: ap(vip, 80), Proto: TCP}
		to := Flow{Src: fwd.Src, Dst: ap(backendA, 8080), Proto: TCP}
		rev := Flow{Src: to.Dst, Dst: to.Src, Proto: TCP}
		for _, s := range []Session{{Key: fwd, To: to, BackendID: 1, LastSeen: 1}, {Key: rev, To: Flow{Src: fwd.Dst, Dst: fwd.Src, Proto: TCP}, BackendID: 1, LastSeen: 1, Reply: true}} {
			if err := d.PutSession(s); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

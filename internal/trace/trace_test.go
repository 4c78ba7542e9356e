// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

func TestCPUCounts(t *testing.T) {
	tr := &Tracer{funcs: []string{"gtp_encap_recv", "gtp_dev_xmit"}}
	per := make([]gtpGtpCpuCounts, 3)
	per[0].C[1*len(contextNames)+int(Backlog)].Packets = 7 // gtp_dev_xmit, backlog, CPU 0
	per[2].C[0*len(contextNames)+int(Idle)].Packets = 2    // gtp_encap_recv, idle, CPU 2
	got := tr.cpuCounts(per)
	want := []Count{
		{CPU: 0, Function: "gtp_dev_xmit", Context: Backlog, Packets: 7},
		{CPU: 2, Function: "gtp_encap_recv", Context: Idle, Packets: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("count %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if MaxFunctions != 64 {
		t.Errorf("MaxFunctions %d, want GTP_MAX_FUNCS (64)", MaxFunctions)
	}
}

// The programs' counting and rate limiting on the running kernel.
// gtp_fentry is attached as a BTF tracepoint on net_dev_queue (the same
// program body; fentry is not attachable on every test host), which runs
// in the sending task's system call, as a gNB's GTP-U send does: each of
// this process's UDP sends is counted once, in its own context; the ring
// gets its first call and then one call per epoch.
func TestCountsAndEpochs(t *testing.T) {
	tr := loadAsTracepoint(t, "net_dev_queue", time.Hour)
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	me := uint32(os.Getpid())
	send := func(n int) {
		buf := make([]byte, 16)
		for range n {
			if _, err := c.WriteTo(buf, c.LocalAddr()); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Read(buf); err != nil {
				t.Fatal(err)
			}
		}
	}
	mine := func() (packets uint64) {
		counts, err := tr.Counts()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range counts {
			if c.TGID == me {
				if c.Context != Process || c.Function != "net_dev_queue" {
					t.Errorf("count %+v: want context process, function net_dev_queue", c)
				}
				packets += c.Packets
			}
		}
		return packets
	}
	// records drains the ring (the programs wrote before the sends returned)
	// and counts this process's records.
	records := func() (n int) {
		for {
			tr.reader.SetDeadline(time.Now())
			ev, err := tr.Read()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return n
			}
			if err != nil {
				t.Fatal(err)
			}
			if ev.TGID == me {
				n++
			}
		}
	}

	send(50)
	if got := mine(); got != 50 {
		t.Errorf("after 50 sends: %d counted", got)
	}
	if got := records(); got != 1 {
		t.Errorf("first 50 sends: %d records, want 1 (the first call)", got)
	}
	send(50)
	if got := records(); got != 0 {
		t.Errorf("50 more sends in the same epoch: %d records, want 0", got)
	}
	if err := tr.epoch.Update(uint32(0), uint64(1), ebpf.UpdateAny); err != nil {
		t.Fatal(err)
	}
	send(50)
	if got := records(); got != 1 {
		t.Errorf("50 sends in the next epoch: %d records, want 1", got)
	}
	if got := mine(); got != 150 {
		t.Errorf("after 150 sends: %d counted", got)
	}
	if err := tr.Forget(me); err != nil {
		t.Fatal(err)
	}
	if got := mine(); got != 0 {
		t.Errorf("after Forget: %d counted", got)
	}

	// A TCP connect sends its SYN inside connect(2), which moves no
	// packets by the tracer's list: counted per CPU as interrupt work (at
	// least one call per connect; other traffic on the host only adds).
	before := cpuWork(t, tr, Interrupt)
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 10 {
		conn, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
	if got := cpuWork(t, tr, Interrupt) - before; got < 10 {
		t.Errorf("10 connects: %d interrupt-context calls counted per CPU, want >= 10", got)
	}
}

func cpuWork(t *testing.T, tr *Tracer, ctx Context) (n uint64) {
	t.Helper()
	counts, err := tr.Counts()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range counts {
		if c.Context == ctx {
			if c.TGID != 0 || c.CPU == processCPU {
				t.Errorf("per-CPU count %+v names a process", c)
			}
			n += c.Packets
		}
	}
	return n
}

// loadAsTracepoint loads gtp_fentry as Load does for one function, but
// attached to the BTF tracepoint tp, and the tracer around it; the sender
// marks and the softirq probe are left out.
func loadAsTracepoint(t *testing.T, tp string, every time.Duration) *Tracer {
	t.Helper()
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Skipf("BPF needs privileges here: %v", err)
	}
	spec, err := loadGtp()
	if err != nil {
		t.Fatal(err)
	}
	if err := setVars(spec, map[string]any{"func_id": uint32(0), "emit_interval_ns": uint64(every)}); err != nil {
		t.Fatal(err)
	}
	keepPrograms(spec, progFentry)
	spec.Programs[progFentry].AttachType = ebpf.AttachTraceRawTp
	spec.Programs[progFentry].AttachTo = tp
	coll, err := ebpf.NewCollection(spec)
	if errors.Is(err, unix.EPERM) {
		t.Skipf("loading a BPF tracing program needs CAP_BPF and CAP_PERFMON: %v", err)
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("this kernel cannot load the tracer (BTF tracepoints need kernel BTF): %v", err)
	}
	if err != nil {
		t.Fatalf("%+v", err)
	}
	t.Cleanup(func() { coll.Close() })
	l, err := link.AttachTracing(link.TracingOptions{Program: coll.Programs[progFentry]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	tr := &Tracer{
		funcs: []string{tp}, skipped: map[string]string{},
		events: coll.Maps[gtpMapGtpEvents], counts: coll.Maps[gtpMapGtpCounts], cpuWork: coll.Maps[gtpMapGtpCpuWork],
		drops: coll.Maps[gtpMapGtpDrops], epoch: coll.Maps[gtpMapGtpEpoch],
	}
	if tr.reader, err = ringbuf.NewReader(tr.events); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.reader.Close() })
	return tr
}

// SPDX-License-Identifier: Apache-2.0

package operator

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/strategy"
	"github.com/swiftlane/swiftlane/internal/trace"
)

// fixture: an operator over a real Applier over the recorder, with fake clocks.
type fixture struct {
	rec     *applier.Recorder
	applier *applier.Applier
	op      *Operator
	now     time.Time
	mono    uint64
	dead    map[uint32]bool
	actives []bool
	logs    bytes.Buffer
}

func newFixture(t *testing.T) *fixture {
	f := &fixture{rec: applier.NewRecorder(), now: time.Unix(1000, 0), mono: 5e9, dead: map[uint32]bool{}}
	f.applier = applier.New(f.rec, t.TempDir(), t.TempDir(), nil)
	f.op = New(f.applier, Options{
		Class: strategy.Critical, SliceNs: 200_000, IdleTimeout: 2 * time.Second,
		TUNDevices: []string{"uesimtun*"},
		Now:        func() time.Time { return f.now },
		Monotonic:  func() uint64 { return f.mono },
		Alive:      func(tgid uint32) bool { return !f.dead[tgid] },
		OnActive:   func(a bool) { f.actives = append(f.actives, a) },
		Log:        slog.New(slog.NewTextHandler(&f.logs, nil)),
	})
	f.applier.OnExit(f.op.HandleExit)
	return f
}

func (f *fixture) advance(d time.Duration) {
	f.now = f.now.Add(d)
	f.mono += uint64(d)
}

// packet is a process-context event that happened `ago` before now.
func (f *fixture) packet(tgid uint32, comm string, ago time.Duration) {
	f.op.Handle(trace.Event{KtimeNs: f.mono - uint64(ago), PID: tgid, TGID: tgid, Comm: comm, Function: "gtp_encap_recv", Context: trace.Process})
}

func TestCarrierGetsEntryAndDecays(t *testing.T) {
	f := newFixture(t)
	f.packet(100, "gnb", 3*time.Millisecond)
	e, ok := f.rec.Process(100)
	if !ok || e.Class != strategy.Critical || e.SliceNs != 200_000 {
		t.Fatalf("entry %+v %v, want critical with slice 200000", e, ok)
	}
	if lat := f.op.Latencies(); len(lat) != 1 || lat[0] != 3*time.Millisecond {
		t.Fatalf("latencies %v, want [3ms]", lat)
	}
	if len(f.actives) != 1 || !f.actives[0] {
		t.Fatalf("OnActive calls %v, want [true]", f.actives)
	}

	// Traffic keeps it; the deadline follows the last event.
	f.advance(1500 * time.Millisecond)
	f.packet(100, "gnb", 0)
	if next := f.op.Expire(); !next.Equal(f.now.Add(2 * time.Second)) {
		t.Fatalf("next expiry %v, want %v", next, f.now.Add(2*time.Second))
	}
	f.advance(1999 * time.Millisecond)
	f.op.Expire()
	if _, ok := f.rec.Process(100); !ok {
		t.Fatal("entry removed before the idle timeout")
	}
	f.advance(time.Millisecond)
	if next := f.op.Expire(); !next.IsZero() {
		t.Fatalf("next expiry %v after the last entry went", next)
	}
	if _, ok := f.rec.Process(100); ok {
		t.Fatal("entry kept after the idle timeout")
	}
	if len(f.op.Carriers()) != 0 || len(f.actives) != 2 || f.actives[1] {
		t.Fatalf("carriers %v, OnActive calls %v", f.op.Carriers(), f.actives)
	}
}

func TestSoftirqIsReportedNotPrioritised(t *testing.T) {
	f := newFixture(t)
	for _, ev := range []trace.Event{
		{TGID: 0, CPU: 1, Function: "gtp_encap_recv", Context: trace.Idle},
		{TGID: 0, PID: 15, Comm: "ksoftirqd/1", CPU: 1, Function: "gtp_rx", Context: trace.KernelThread},
		// A hog interrupted in user mode: the packet is not its.
		{TGID: 0, CPU: 0, Comm: "stress-ng-cpu", Function: "gtp_encap_recv", Context: trace.Interrupt},
		// A sidecar in sendmsg whose softirq ran packets it did not send.
		{TGID: 300, PID: 301, Comm: "sidecar", CPU: 1, Function: "gtp_dev_xmit", Context: trace.Backlog},
		{TGID: 0, CPU: 1, Function: "gtp_encap_recv", Context: trace.Idle},
	} {
		f.op.Handle(ev)
	}
	if f.rec.Processes() != 0 || len(f.op.Carriers()) != 0 || len(f.actives) != 0 {
		t.Fatalf("softirq events made %d entries", f.rec.Processes())
	}
	cpus := f.op.CPUs()
	if len(cpus) != 2 || cpus[0].CPU != 0 || cpus[1].CPU != 1 || cpus[1].Events != 4 || cpus[1].Context != trace.Idle {
		t.Fatalf("CPU report %+v", cpus)
	}
	// Logged once per CPU and context: idle, kthread and backlog on CPU 1.
	if n := strings.Count(f.logs.String(), "reported as its CPU"); n != 4 || !strings.Contains(f.logs.String(), "context=backlog") {
		t.Fatalf("%d softirq reports logged, want 4 (one per CPU and context):\n%s", n, f.logs.String())
	}
	f.advance(2 * time.Second)
	f.op.Expire()
	if len(f.op.CPUs()) != 0 {
		t.Fatal("CPU report kept after the idle timeout")
	}
}

// A UE simulator moving packets through its tunnel is a carrier; a process
// on another TUN device (a VPN) is not, however busy.
func TestTUNUsers(t *testing.T) {
	f := newFixture(t)
	for _, ev := range []trace.Event{
		{TGID: 300, Comm: "wireguard-go", Function: "tun_get_user", Ifname: "wg0", Context: trace.Process},
		{TGID: 300, Comm: "wireguard-go", Function: "tun_do_read", Ifname: "wg0", Context: trace.Process},
		{TGID: 301, Comm: "odd", Function: "tun_do_read", Ifname: "", Context: trace.Process},
	} {
		f.op.Handle(ev)
	}
	if f.rec.Processes() != 0 || len(f.actives) != 0 {
		t.Fatalf("users of unlisted TUN devices made %d entries", f.rec.Processes())
	}
	f.op.Handle(trace.Event{KtimeNs: f.mono, TGID: 200, Comm: "nr-ue", Function: "tun_do_read", Ifname: "uesimtun0", Context: trace.Process})
	if e, ok := f.rec.Process(200); !ok || e.Class != strategy.Critical {
		t.Fatalf("nr-ue entry %+v %v, want critical", e, ok)
	}
	if cs := f.op.Carriers(); len(cs) != 1 || cs[0].Function != "tun_do_read" {
		t.Fatalf("carriers %+v", cs)
	}
	// Its writes keep it, like a gNB's packets.
	f.advance(1500 * time.Millisecond)
	f.op.Handle(trace.Event{TGID: 200, Comm: "nr-ue", Function: "tun_get_user", Ifname: "uesimtun0", Context: trace.Process})
	f.advance(1500 * time.Millisecond)
	f.op.Expire()
	if _, ok := f.rec.Process(200); !ok {
		t.Fatal("entry removed although the tunnel carried packets within the idle timeout")
	}
}

func TestTUNFunctionsOnlyWhenDevicesNamed(t *testing.T) {
	cfg := config.Automatic{TUNDevices: []string{"uesimtun*"}}
	if fns := Functions(cfg); !slices.Contains(fns, "tun_get_user") || !slices.Contains(fns, "gtp_encap_recv") {
		t.Fatalf("functions %v: want the GTP-U defaults and the tun driver's", fns)
	}
	cfg.TUNDevices = nil
	if fns := Functions(cfg); slices.Contains(fns, "tun_get_user") {
		t.Fatalf("functions %v: the tun driver is traced with no TUN device named", fns)
	}
	if !slices.Equal(trace.DefaultFunctions, Functions(config.Automatic{})) {
		t.Fatal("Functions changed the defaults")
	}
}

// A gNB restart: the old process exits (the scheduler's exit event), the new
// one gets its entry on its first packet; a late event of the old one does
// not bring a stale entry back.
func TestRestartedCarrier(t *testing.T) {
	f := newFixture(t)
	f.packet(100, "gnb", time.Millisecond)
	f.rec.DeleteProcess(100) // what the BPF exit hook does
	f.dead[100] = true
	f.applier.HandleExit(100)
	if len(f.op.Carriers()) != 0 || len(f.applier.Dynamic(Source)) != 0 {
		t.Fatalf("state kept after exit: %v %v", f.op.Carriers(), f.applier.Dynamic(Source))
	}
	f.packet(100, "gnb", 0) // late event from the ring
	if _, ok := f.rec.Process(100); ok {
		t.Fatal("late event of an exited process re-created its entry")
	}

	f.advance(50 * time.Millisecond)
	f.packet(101, "gnb", 2*time.Millisecond)
	if _, ok := f.rec.Process(101); !ok {
		t.Fatal("restarted carrier not prioritised")
	}
	lat := f.op.Latencies()
	if len(lat) != 2 || lat[1] != 2*time.Millisecond {
		t.Fatalf("latencies %v", lat)
	}
	if want := []bool{true, false, true}; len(f.actives) != 3 || f.actives[0] != want[0] || f.actives[1] != want[1] || f.actives[2] != want[2] {
		t.Fatalf("OnActive calls %v, want %v", f.actives, want)
	}
}

// Re-matching the configured strategies keeps the operator's entries.
func TestEntriesSurviveStrategyChanges(t *testing.T) {
	f := newFixture(t)
	f.packet(100, "gnb", 0)
	empty, _ := strategy.Compile(nil)
	if err := f.applier.SetStrategies(empty); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.rec.Process(100); !ok {
		t.Fatal("SetStrategies removed the operator's entry")
	}
}

func TestEmitIntervalBelowIdleTimeout(t *testing.T) {
	for _, idle := range []time.Duration{100 * time.Millisecond, 5 * time.Second, time.Hour} {
		if e := EmitInterval(idle); e <= 0 || e >= idle || e > time.Second {
			t.Errorf("EmitInterval(%v) = %v", idle, e)
		}
	}
}

// The call counts the tracer keeps per (process, function, CPU context)
// become a carrier's packets and rate: the packet functions' calls (a packet
// passes gtp_encap_recv and gtp_rx, counted once); softirq counts and other
// processes are not the carrier's.
func TestCarrierPacketsAndRate(t *testing.T) {
	f := newFixture(t)
	a := &Automatic{Operator: f.op}
	f.packet(100, "gnb", 0)
	counts := func(gnb, upf, softirq uint64) []trace.Count {
		return []trace.Count{
			{TGID: 100, Function: "gtp_encap_recv", Context: trace.Process, Packets: gnb},
			{TGID: 100, Function: "gtp_rx", Context: trace.Process, Packets: gnb},
			{TGID: 100, Function: "gtp_dev_xmit", Context: trace.Process, Packets: gnb / 2},
			{TGID: 200, Function: "gtp_encap_recv", Context: trace.Process, Packets: upf},
			{TGID: 0, CPU: 1, Function: "gtp_encap_recv", Context: trace.Interrupt, Packets: softirq},
		}
	}
	cs := a.withPackets(f.op.Carriers(), counts(1000, 50, 7000), f.now)
	if len(cs) != 1 || cs[0].TGID != 100 || cs[0].Packets != 1500 || cs[0].PacketsPerSecond != 0 {
		t.Fatalf("first reading: %+v, want pid 100 with 1500 packets and no rate yet", cs)
	}
	// A second reader within the window shares the first sample.
	f.advance(500 * time.Millisecond)
	if cs = a.withPackets(f.op.Carriers(), counts(1500, 50, 7000), f.now); cs[0].PacketsPerSecond != 0 || cs[0].Packets != 2250 {
		t.Fatalf("within the window: %+v, want 2250 packets and no rate", cs)
	}
	// A scrape's reading (no rates) does not move the window.
	f.advance(1000 * time.Millisecond)
	if cs = a.withPackets(f.op.Carriers(), counts(2000, 50, 9000), time.Time{}); cs[0].PacketsPerSecond != 0 || cs[0].Packets != 3000 {
		t.Fatalf("reading without rates: %+v, want 3000 packets and no rate", cs)
	}
	f.advance(500 * time.Millisecond)
	if cs = a.withPackets(f.op.Carriers(), counts(3000, 50, 9000), f.now); cs[0].PacketsPerSecond != 1500 {
		t.Fatalf("after 2 s: %+v, want (4500-1500)/2 = 1500 packets/s", cs)
	}
	// A count that went down was forgotten (exit) or evicted and belongs to
	// a new process with the PID: no rate.
	f.advance(time.Second)
	if cs = a.withPackets(f.op.Carriers(), counts(10, 50, 9000), f.now); cs[0].PacketsPerSecond != 0 || cs[0].Packets != 15 {
		t.Fatalf("count went down: %+v, want 15 packets and no rate", cs)
	}
}

// With a custom function list that has no packet function, a carrier's
// packets are its busiest function's calls.
func TestCarrierPacketsWithoutEntryPoints(t *testing.T) {
	f := newFixture(t)
	a := &Automatic{Operator: f.op}
	f.packet(100, "upf", 0)
	cs := a.withPackets(f.op.Carriers(), []trace.Count{
		{TGID: 100, Function: "pdr_find_by_gtp1u", Context: trace.Process, Packets: 40},
		{TGID: 100, Function: "ip4_find_route", Context: trace.Process, Packets: 30},
	}, f.now)
	if len(cs) != 1 || cs[0].Packets != 40 {
		t.Fatalf("%+v, want 40 packets (the busiest function's calls)", cs)
	}
}

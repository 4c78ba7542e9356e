// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"testing"
	"time"
)

// The sweep decides from a snapshot and deletes later. Packets that arrive
// in between must win: a SYN that reopens a closed connection's tuple (the
// program deletes the old pair and inserts a new one under the same keys)
// and a packet that wakes an idle connection both keep their sessions,
// while what stayed idle goes. The race is made deterministic by sending
// real packets through the program from the hook between read and delete.
func TestSweepKeepsWhatChangedAfterItsRead(t *testing.T) {
	d := load(t, testConstants())
	service(t, d, Frontend{vip, 80, TCP}, false, ap(backendA, 8080))
	conn := func(port uint16) pkt {
		return pkt{src: ap(client, port), dst: ap(vip, 80), proto: TCP, tcpFlags: 0x02}
	}
	reopened, woken, idle, orphan := conn(40000), conn(40001), conn(40002), conn(40003)
	for _, p := range []pkt{reopened, woken, idle, orphan} {
		if ret, _ := run(t, d, p.bytes()); ret != actOK {
			t.Fatalf("SYN from port %d: verdict %d", p.src.Port(), ret)
		}
	}
	fin := reopened
	fin.tcpFlags = 0x11
	run(t, d, fin.bytes())
	// The orphan: a reply entry whose forward entry LRU evicted.
	if err := d.DeleteSession(Flow{Src: orphan.src, Dst: orphan.dst, Proto: TCP}); err != nil {
		t.Fatal(err)
	}
	// Every entry quiet for 3 s, so a packet now rewrites last_seen
	// (last_seen_grain_ns is 1 s).
	ss, err := d.Sessions()
	if err != nil || len(ss) != 7 {
		t.Fatalf("sessions before the sweep: %d, %v; want 7", len(ss), err)
	}
	for _, s := range ss {
		s.LastSeen = Monotonic() - 3*time.Second
		if err := d.PutSession(s); err != nil {
			t.Fatal(err)
		}
	}

	d.afterSweepRead = func() {
		run(t, d, reopened.bytes()) // SYN on the closed tuple: a new connection
		ack := woken
		ack.tcpFlags = 0x10
		run(t, d, ack.bytes())
	}
	// An hour from now every entry in the snapshot is past its timeout.
	live, removed, err := d.Sweep(Monotonic()+time.Hour, Timeouts{TCP: time.Minute, UDP: time.Minute, Closing: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if live != 0 || removed != 3 {
		t.Errorf("Sweep: %d live, %d removed; want 0 live in its snapshot, 3 removed (the idle pair and the orphan)", live, removed)
	}

	left := map[Flow]Session{}
	ss, _ = d.Sessions()
	for _, s := range ss {
		left[s.Key] = s
	}
	for _, c := range []struct {
		name string
		p    pkt
		kept bool
	}{{"reopened", reopened, true}, {"woken", woken, true}, {"idle", idle, false}} {
		fwd, ok := left[Flow{Src: c.p.src, Dst: c.p.dst, Proto: TCP}]
		if ok != c.kept {
			t.Errorf("%s connection: forward entry kept %v, want %v", c.name, ok, c.kept)
			continue
		}
		if !ok {
			continue
		}
		if _, ok := left[Flow{Src: fwd.To.Dst, Dst: fwd.To.Src, Proto: TCP}]; !ok {
			t.Errorf("%s connection: its reply entry was deleted, its forward entry kept", c.name)
		}
	}
	if len(left) != 4 {
		t.Errorf("%d entries left, want 4 (two connections' pairs): %+v", len(left), ss)
	}
	if s := left[Flow{Src: reopened.src, Dst: reopened.dst, Proto: TCP}]; s.Closing {
		t.Error("the reopened connection's entry is the old, closing one")
	}
}

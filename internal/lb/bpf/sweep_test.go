// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"testing"
	"time"
)

// The sweep reads the session maps and deletes later. Packets that arrive
// in between must win: a SYN that reopens a closed connection's tuple (the
// program deletes the old pair and inserts a new one under the same keys)
// and a packet that wakes an idle connection both keep their sessions, as
// does a connection only its backend still talks on (its forward entry is
// old, its reply entry fresh); what stayed idle goes, and so does a reply
// entry whose forward entry was evicted. The race is made deterministic by
// sending real packets through the program from the hook between read and
// delete.
func TestSweepKeepsWhatChangedAfterItsRead(t *testing.T) {
	d := load(t, testConstants())
	be := ap(backendA, 8080)
	service(t, d, Frontend{vip, 80, TCP}, false, be)
	conn := func(port uint16) pkt {
		return pkt{src: ap(client, port), dst: ap(vip, 80), proto: TCP, tcpFlags: 0x02}
	}
	reopened, woken, pushed, idle, orphan := conn(40000), conn(40001), conn(40002), conn(40003), conn(40004)
	for _, p := range []pkt{reopened, woken, pushed, idle, orphan} {
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
	// Every entry quiet for an hour.
	ss, err := d.Sessions()
	if err != nil || len(ss) != 9 {
		t.Fatalf("sessions before the sweep: %d, %v; want 9", len(ss), err)
	}
	for _, s := range ss {
		s.LastSeen = Monotonic() - time.Hour
		if err := d.PutSession(s); err != nil {
			t.Fatal(err)
		}
	}
	// The backend sends on the pushed connection: its reply entry only.
	if ret, _ := run(t, d, pkt{src: be, dst: pushed.src, proto: TCP, tcpFlags: 0x10}.bytes()); ret != actOK {
		t.Fatalf("backend's packet: verdict %d", ret)
	}

	d.afterSweepRead = func() {
		run(t, d, reopened.bytes()) // SYN on the closed tuple: a new connection
		ack := woken
		ack.tcpFlags = 0x10
		run(t, d, ack.bytes())
	}
	live, removed, err := d.Sweep(Monotonic(), Timeouts{TCP: time.Minute, UDP: time.Minute, Closing: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if live != 3 || removed != 3 {
		t.Errorf("Sweep: %d live, %d removed; want 3 live, 3 removed (the idle pair and the orphan)", live, removed)
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
	}{{"reopened", reopened, true}, {"woken", woken, true}, {"pushed", pushed, true}, {"idle", idle, false}} {
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
	if len(left) != 6 {
		t.Errorf("%d entries left, want 6 (three connections' pairs): %+v", len(left), ss)
	}
	if s := left[Flow{Src: reopened.src, Dst: reopened.dst, Proto: TCP}]; s.Closing {
		t.Error("the reopened connection's entry is the old, closing one")
	}
}

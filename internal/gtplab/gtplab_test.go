// SPDX-License-Identifier: Apache-2.0

package gtplab

import (
	"bytes"
	"net"
	"testing"
	"time"
)

func TestDecap(t *testing.T) {
	payload := []byte{0x45, 0, 0, 20}
	plain := append([]byte{0x30, 0xff, 0, 4, 0, 0, 2, 0}, payload...)
	if got, ok := Decap(plain, 0x200); !ok || !bytes.Equal(got, payload) {
		t.Fatalf("plain G-PDU: %x %v", got, ok)
	}
	if _, ok := Decap(plain, 0x201); ok {
		t.Fatal("accepted another TEID")
	}
	// E flag with one PDU session container (1 unit = 4 bytes), then payload.
	ext := append([]byte{0x34, 0xff, 0, 12, 0, 0, 2, 0, 0, 0, 0, 0x85, 1, 0x10, 0x01, 0}, payload...)
	if got, ok := Decap(ext, 0x200); !ok || !bytes.Equal(got, payload) {
		t.Fatalf("G-PDU with extension header: %x %v", got, ok)
	}
	if _, ok := Decap([]byte{0x30, 0x1a, 0, 0, 0, 0, 2, 0}, 0x200); ok {
		t.Fatal("accepted an echo request as a G-PDU")
	}
	if _, ok := Decap(plain[:6], 0x200); ok {
		t.Fatal("accepted a truncated header")
	}
}

func TestChecksum(t *testing.T) {
	b := []byte{8, 0, 0, 0, 0x12, 0x34, 0, 1}
	c := Checksum(b)
	b[2], b[3] = byte(c>>8), byte(c)
	if Checksum(b) != 0 {
		t.Fatal("checksum does not verify")
	}
}

// Each UE's packets get its own TEIDs: uplink by the inner source address,
// downlink by the G-PDU's TEID; anything else is not ours.
func TestPerUETEIDs(t *testing.T) {
	topo := Default()
	if topo.UEs < 2 {
		t.Fatalf("the lab has %d UEs; the background traffic needs several", topo.UEs)
	}
	packet := func(src string) []byte {
		p := make([]byte, 20)
		p[0] = 0x45
		copy(p[12:], net.ParseIP(src).To4())
		return p
	}
	for src, want := range map[string]uint32{"10.60.0.1": 0x100, "10.60.0.4": 0x103} {
		if teid, ok := topo.uplinkTEID(packet(src)); !ok || teid != want {
			t.Errorf("uplink from %s: TEID %#x %v, want %#x", src, teid, ok, want)
		}
	}
	for _, src := range []string{"10.60.0.5", "10.60.0.0", "10.61.0.1"} {
		if teid, ok := topo.uplinkTEID(packet(src)); ok {
			t.Errorf("uplink from %s (no such UE) got TEID %#x", src, teid)
		}
	}
	if got := topo.UEAddrN(3).String(); got != "10.60.0.4" || topo.UEAddr.String() != "10.60.0.1" {
		t.Errorf("UE 3 is %s (UE 0 %s)", got, topo.UEAddr)
	}
	g := &Gnb{T: topo}
	payload := []byte{0x45, 0, 0, 20}
	gpdu := func(teid byte) []byte { return append([]byte{0x30, 0xff, 0, 4, 0, 0, 2, teid}, payload...) }
	for teid, want := range map[byte]bool{0x00: true, 0x03: true, 0x04: false} {
		if _, ok := g.decap(gpdu(teid)); ok != want {
			t.Errorf("downlink TEID 0x2%02x: accepted %v, want %v", teid, ok, want)
		}
	}
}

// TestPacingSpreadsSends: each UE sends exactly pps a second, the sends of
// one period spread over it in bursts of at most ceil(n/slots), no two
// slots closer than minSlot.
func TestPacingSpreadsSends(t *testing.T) {
	for _, c := range []struct{ n, pps, wantSlots int }{
		{127, 2, 100}, {127, 10, 20}, {15, 10, 15}, {1, 50, 1}, {127, 10000, 1}, {3, 250, 1},
	} {
		p := newPacing(c.n, c.pps)
		if p.slots != c.wantSlots {
			t.Errorf("n=%d pps=%d: %d slots, want %d", c.n, c.pps, p.slots, c.wantSlots)
		}
		if p.slots > 1 && p.every < minSlot {
			t.Errorf("n=%d pps=%d: a slot every %v, under minSlot %v", c.n, c.pps, p.every, minSlot)
		}
		if period := time.Duration(p.slots) * p.every; period > time.Second/time.Duration(c.pps) {
			t.Errorf("n=%d pps=%d: %d slots of %v make a period of %v, longer than 1/pps", c.n, c.pps, p.slots, p.every, period)
		}
		sends := make([]int, c.n)
		burst := 0
		for slot := 0; slot < p.slots; slot++ {
			ues := p.uesOf(slot, c.n)
			for _, i := range ues {
				sends[i]++
			}
			burst = max(burst, len(ues))
		}
		for i, k := range sends {
			if k != 1 {
				t.Fatalf("n=%d pps=%d: UE %d sends %d times a period, want 1", c.n, c.pps, i+1, k)
			}
		}
		if want := (c.n + p.slots - 1) / p.slots; burst > want {
			t.Errorf("n=%d pps=%d: a burst of %d sends, want at most %d", c.n, c.pps, burst, want)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"net/netip"
	"testing"
	"time"
)

// ClientIP affinity: a recent entry whose backend is still a member wins
// over the selection slots; an expired one, or one whose backend left the
// frontend's members (removed, terminating), does not.
func TestAffinity(t *testing.T) {
	d := load(t, testConstants())
	fe := Frontend{vip, 80, TCP}
	d.PutBackend(1, ap(backendA, 8080))
	d.PutBackend(2, ap(backendB, 8080))
	// Slots hold only A; B is a member as if it had just left the slots
	// while an affinity entry still named it. The slots alone would always
	// pick A, so reaching B proves the affinity entry was used.
	e := ServiceEntry{ID: 5, AffinitySec: 10, Slots: []uint32{1}}
	if err := d.PutService(fe, e, ServiceEntry{}); err != nil {
		t.Fatal(err)
	}
	if err := d.objs.SvcMembers.Put(lbMemberKey{SvcId: 5, BackendId: 2}, uint8(1)); err != nil {
		t.Fatal(err)
	}
	key := lbAffinityKey{SvcId: 5, Client: addrBE(client)}
	sport := uint16(40000)
	connect := func() netip.Addr {
		t.Helper()
		sport++
		_, out := run(t, d, pkt{src: ap(client, sport), dst: ap(vip, 80), proto: TCP, tcpFlags: 0x02}.bytes())
		return parse(t, out).dst
	}
	remember := func(backend uint32, age time.Duration) {
		t.Helper()
		v := lbAffinityVal{BackendId: backend, LastUsed: uint64(Monotonic() - age)}
		if err := d.objs.Affinity.Put(key, v); err != nil {
			t.Fatal(err)
		}
	}

	if got := connect(); got != backendA {
		t.Fatalf("first connection went to %v, want the only slot %v", got, backendA)
	}
	var v lbAffinityVal
	if err := d.objs.Affinity.Lookup(key, &v); err != nil || v.BackendId != 1 {
		t.Fatalf("affinity after the first connection: %+v (%v), want backend 1", v, err)
	}

	remember(2, 9*time.Second) // within the 10 s timeout
	if got := connect(); got != backendB {
		t.Fatalf("recent affinity to B ignored: went to %v", got)
	}
	if err := d.objs.Affinity.Lookup(key, &v); err != nil || v.BackendId != 2 || time.Duration(v.LastUsed) < Monotonic()-time.Second {
		t.Fatalf("affinity not refreshed by the new connection: %+v (%v)", v, err)
	}

	remember(2, 11*time.Second) // expired
	if got := connect(); got != backendA {
		t.Fatalf("expired affinity to B used: went to %v, want %v from the slots", got, backendA)
	}

	remember(2, 0)
	// B leaves the frontend: PutService with the old members removes it.
	if err := d.PutService(fe, e, ServiceEntry{ID: 5, AffinitySec: 10, Slots: []uint32{1, 2}}); err != nil {
		t.Fatal(err)
	}
	if got := connect(); got != backendA {
		t.Fatalf("affinity to a backend no longer taking connections used: went to %v", got)
	}
	if st, _ := d.Stats(); st.AffinityHits != 1 {
		t.Fatalf("affinity hits %d, want 1", st.AffinityHits)
	}

	// Without affinity, nothing is remembered.
	d.objs.Affinity.Delete(key)
	fe2 := Frontend{vip, 81, TCP}
	if err := d.PutService(fe2, ServiceEntry{ID: 6, Slots: []uint32{1}}, ServiceEntry{}); err != nil {
		t.Fatal(err)
	}
	run(t, d, pkt{src: ap(client, 50000), dst: ap(vip, 81), proto: TCP, tcpFlags: 0x02}.bytes())
	if err := d.objs.Affinity.Lookup(lbAffinityKey{SvcId: 6, Client: addrBE(client)}, &v); err == nil {
		t.Fatalf("a frontend without affinity wrote an affinity entry %+v", v)
	}
}

// External-IP frontends SNAT to the configured node address, not to the
// address the client reached.
func TestSNATToConfiguredAddress(t *testing.T) {
	d := load(t, testConstants())
	extVIP := netip.MustParseAddr("203.0.113.10")
	fe := Frontend{extVIP, 80, TCP}
	d.PutBackend(1, ap(backendA, 8080))
	if err := d.PutService(fe, ServiceEntry{ID: 5, Flags: FlagSNAT, SNATAddr: nodeIP, Slots: []uint32{1}}, ServiceEntry{}); err != nil {
		t.Fatal(err)
	}
	_, out := run(t, d, pkt{src: ap(extIP, 40000), dst: ap(extVIP, 80), proto: TCP, tcpFlags: 0x02}.bytes())
	p := parse(t, out)
	if p.src != nodeIP || p.dst != backendA {
		t.Fatalf("forward %v -> %v, want %v -> %v", p.src, p.dst, nodeIP, backendA)
	}
	_, back := run(t, d, pkt{src: ap(backendA, 8080), dst: ap(nodeIP, p.sport), proto: TCP, tcpFlags: 0x12}.bytes())
	expect(t, "reply", parse(t, back), ap(extVIP, 80), ap(extIP, 40000))
}

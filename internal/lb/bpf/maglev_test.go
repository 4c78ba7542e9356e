// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// flowHash mirrors flow_hash in lb.bpf.c over the fields as the program loads
// them (network byte order read as native integers).
func flowHash(src, dst netip.AddrPort, proto Proto) uint32 {
	s, d := src.Addr().As4(), dst.Addr().As4()
	a := binary.NativeEndian.Uint32(s[:]) + 0xdeadbeef
	b := binary.NativeEndian.Uint32(d[:]) + 0xdeadbeef
	c := (uint32(portBE(src.Port())) | uint32(portBE(dst.Port()))<<16) + uint32(proto)
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return c
}

// A Maglev service picks its slot from the flow's hash: the same 5-tuple
// reaches the same backend on two independently loaded datapaths (two LB
// nodes, or one before and after a restart), exactly the slot user space
// expects, and many tuples spread over all backends.
func TestMaglevSlotFollowsFlowHash(t *testing.T) {
	const tableSize = 1021
	fe := Frontend{vip, 80, TCP}
	bes := []netip.AddrPort{ap(backendA, 8080), ap(backendB, 8080), ap(netip.MustParseAddr("10.244.4.2"), 8080)}
	// Any table will do for the datapath; a shuffled one makes a wrong slot
	// index show up as a wrong backend.
	rng := rand.New(rand.NewPCG(6, 6))
	table := make([]uint32, tableSize)
	for i := range table {
		table[i] = uint32(i%len(bes)) + 1
	}
	rng.Shuffle(len(table), func(i, j int) { table[i], table[j] = table[j], table[i] })

	nodes := make([]*Datapath, 2)
	for i := range nodes {
		d := load(t, testConstants())
		for j, be := range bes {
			if err := d.PutBackend(uint32(j)+1, be); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.PutService(fe, ServiceEntry{ID: 9, Flags: FlagMaglev, Slots: table}, ServiceEntry{}); err != nil {
			t.Fatal(err)
		}
		nodes[i] = d
	}

	const flows = 300
	hits := map[netip.Addr]int{}
	for range flows {
		src := ap(netip.AddrFrom4([4]byte{10, 244, byte(1 + rng.IntN(200)), byte(2 + rng.IntN(250))}), uint16(32768+rng.IntN(28000)))
		want := bes[table[flowHash(src, ap(vip, 80), TCP)%tableSize]-1]
		syn := pkt{src: src, dst: ap(vip, 80), proto: TCP, tcpFlags: 0x02}.bytes()
		for i, d := range nodes {
			ret, out := run(t, d, syn)
			if ret != actOK {
				t.Fatalf("node %d: verdict %d for %v", i, int32(ret), src)
			}
			expect(t, "maglev forward", parse(t, out), src, want)
		}
		hits[want.Addr()]++
	}
	for _, be := range bes {
		// Expected 100 each; 60 is over 5 standard deviations below.
		if hits[be.Addr()] < 60 {
			t.Fatalf("backends hit %v over %d flows: %v is starved", hits, flows, be)
		}
	}
	if st, _ := nodes[0].Stats(); st.SessionsCreated != flows {
		t.Fatalf("sessions_created %d, want %d (one per tuple)", st.SessionsCreated, flows)
	}
}

// The hash is only used when the service asks for it: a random service
// sends one tuple, seen fresh by several datapaths, to different backends.
func TestRandomSelectionIgnoresFlowHash(t *testing.T) {
	fe := Frontend{vip, 80, TCP}
	syn := pkt{src: ap(client, 40000), dst: ap(vip, 80), proto: TCP, tcpFlags: 0x02}.bytes()
	seen := map[netip.Addr]bool{}
	// Two backends: 30 fresh picks all landing on one has probability 2^-29.
	for range 30 {
		d := load(t, testConstants())
		service(t, d, fe, false, ap(backendA, 8080), ap(backendB, 8080))
		_, out := run(t, d, syn)
		seen[parse(t, out).dst] = true
		d.Close()
	}
	if len(seen) != 2 {
		t.Fatalf("random selection sent one tuple to %v only on 30 fresh datapaths", seen)
	}
}

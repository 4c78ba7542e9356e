// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
)

// loadBalancerSourceRanges in the program, both families: a frontend with
// FlagSourceRanges opens connections only for clients inside its own
// ranges; established connections and frontends without the flag are not
// affected, and a range belongs to its frontend alone.
func TestSourceRanges(t *testing.T) {
	for _, fam := range []struct {
		name                 string
		lbIP, in, out, other netip.Addr
		inRange, outRange    netip.Prefix
	}{
		{"IPv4", netip.MustParseAddr("203.0.113.50"), extIP, client, backendA,
			netip.MustParsePrefix("198.18.0.7/24"), netip.MustParsePrefix("10.244.0.0/16")},
		{"IPv6", netip.MustParseAddr("fd00:113::50"), ext6, client6, backend6A,
			netip.MustParsePrefix("fd00:18::/64"), netip.MustParsePrefix("fd00:244::/32")},
	} {
		t.Run(fam.name, func(t *testing.T) {
			d := load(t, testConstants6())
			be := ap(fam.other, 8080)
			if err := d.PutBackend(1, be); err != nil {
				t.Fatal(err)
			}
			lb := Frontend{fam.lbIP, 80, TCP}
			// The same backend behind a second port of the LB IP whose range
			// is the outside client's: ranges are per frontend.
			lb2 := Frontend{fam.lbIP, 81, TCP}
			entry := ServiceEntry{ID: 7, Flags: FlagSourceRanges, Slots: []uint32{1}, SourceRanges: []netip.Prefix{fam.inRange}}
			entry2 := ServiceEntry{ID: 8, Flags: FlagSourceRanges, Slots: []uint32{1}, SourceRanges: []netip.Prefix{fam.outRange}}
			for _, s := range []struct {
				fe Frontend
				e  ServiceEntry
			}{{lb, entry}, {lb2, entry2}} {
				if err := d.PutService(s.fe, s.e, ServiceEntry{}); err != nil {
					t.Fatal(err)
				}
			}
			open := func(from netip.AddrPort, fe Frontend) uint32 {
				ret, _ := run(t, d, pkt{src: from, dst: ap(fe.Addr, fe.Port), proto: TCP, tcpFlags: 0x02}.bytes())
				return ret
			}
			dropped := func() uint64 {
				st, err := d.Stats()
				if err != nil {
					t.Fatal(err)
				}
				return st.Drops["source_range"]
			}

			inside := ap(fam.in, 40000)
			ret, out := run(t, d, pkt{src: inside, dst: ap(lb.Addr, 80), proto: TCP, tcpFlags: 0x02}.bytes())
			if ret != actOK {
				t.Fatalf("client %v inside %v: verdict %d, want translated", fam.in, fam.inRange, int32(ret))
			}
			expect(t, "inside client", parse(t, out), inside, be)
			if ret := open(ap(fam.out, 40001), lb); ret != actShot {
				t.Fatalf("client %v outside %v: verdict %d, want dropped", fam.out, fam.inRange, int32(ret))
			}
			if n := dropped(); n != 1 {
				t.Fatalf("drops_total{reason=source_range} = %d, want 1", n)
			}
			if ret := open(ap(fam.out, 40002), lb2); ret != actOK {
				t.Fatalf("client %v to the frontend whose range holds it: verdict %d, want translated", fam.out, int32(ret))
			}
			if ret := open(ap(fam.in, 40003), lb2); ret != actShot {
				t.Fatalf("client %v to the frontend whose range lacks it: verdict %d, want dropped", fam.in, int32(ret))
			}

			// Narrowed to the other range: the inside client's open
			// connection goes on, its new ones are refused, the other
			// client is let in.
			narrowed := entry
			narrowed.SourceRanges = []netip.Prefix{fam.outRange}
			if err := d.PutService(lb, narrowed, entry); err != nil {
				t.Fatal(err)
			}
			if ret, _ := run(t, d, pkt{src: inside, dst: ap(lb.Addr, 80), proto: TCP, tcpFlags: 0x10, payload: []byte("more")}.bytes()); ret != actOK {
				t.Fatalf("established connection after its range was removed: verdict %d, want still translated", int32(ret))
			}
			if ret := open(ap(fam.in, 40004), lb); ret != actShot {
				t.Fatalf("new connection from %v after its range was removed: verdict %d, want dropped", fam.in, int32(ret))
			}
			if ret := open(ap(fam.out, 40005), lb); ret != actOK {
				t.Fatalf("client %v after its range was added: verdict %d, want translated", fam.out, int32(ret))
			}

			// The flag without ranges admits nobody; without the flag,
			// everybody (and the ranges are gone from the map).
			closed := narrowed
			closed.SourceRanges = nil
			if err := d.PutService(lb, closed, narrowed); err != nil {
				t.Fatal(err)
			}
			if ret := open(ap(fam.out, 40006), lb); ret != actShot {
				t.Fatalf("flag without ranges: verdict %d, want dropped", int32(ret))
			}
			free := closed
			free.Flags = 0
			if err := d.PutService(lb, free, closed); err != nil {
				t.Fatal(err)
			}
			if ret := open(ap(fam.in, 40007), lb); ret != actOK {
				t.Fatalf("no flag: verdict %d, want translated", int32(ret))
			}

			// What the maps hold reads back (as after a restart); deleting a
			// frontend deletes its ranges.
			fes, _, err := d.Programmed()
			if err != nil {
				t.Fatal(err)
			}
			if got := fes[lb2].SourceRanges; !slices.Equal(got, []netip.Prefix{fam.outRange.Masked()}) {
				t.Fatalf("Programmed: %v has ranges %v, want [%v]", lb2, got, fam.outRange.Masked())
			}
			if got := fes[lb].SourceRanges; len(got) != 0 {
				t.Fatalf("Programmed: %v has ranges %v without the flag, want none", lb, got)
			}
			if err := d.DeleteService(lb2, fes[lb2]); err != nil {
				t.Fatal(err)
			}
			if n := countRanges[uint32](d.objs.SrcRanges) + countRanges[[4]uint32](d.objs.SrcRanges6); n != 0 {
				t.Fatalf("%d source ranges left after every frontend with ranges was deleted", n)
			}
		})
	}
}

func countRanges[A addrWords](m *ebpf.Map) (n int) {
	var k srcRangeKey[A]
	var v uint8
	for it := m.Iterate(); it.Next(&k, &v); {
		n++
	}
	return n
}

// A range of the other family is refused before anything is written.
func TestSourceRangeFamily(t *testing.T) {
	d := load(t, testConstants6())
	fe := Frontend{netip.MustParseAddr("203.0.113.50"), 80, TCP}
	err := d.PutService(fe, ServiceEntry{ID: 1, Flags: FlagSourceRanges, SourceRanges: []netip.Prefix{netip.MustParsePrefix("fd00::/8")}}, ServiceEntry{})
	if err == nil {
		t.Fatal("IPv6 range on an IPv4 frontend accepted")
	}
	if fes, _, _ := d.Programmed(); len(fes) != 0 {
		t.Fatalf("refused frontend programmed anyway: %v", fes)
	}
}

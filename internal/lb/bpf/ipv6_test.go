// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

func testConstants6() Constants {
	c := testConstants()
	c.IPv6, c.HairpinAddr6 = true, hairpin6
	return c
}

// IPv6 ClusterIP, NodePort and hairpin: the same translations as IPv4, with
// the TCP/UDP checksums (pseudo header of 16-byte addresses) still valid.
func TestIPv6Translation(t *testing.T) {
	for _, proto := range []Proto{TCP, UDP} {
		t.Run(proto.String(), func(t *testing.T) {
			d := load(t, testConstants6())
			if err := d.PutBackend(1, ap(backend6A, 8080)); err != nil {
				t.Fatal(err)
			}
			for _, fe := range []struct {
				fe    Frontend
				flags ServiceFlags
			}{{Frontend{vip6, 80, proto}, 0}, {Frontend{node6, 30080, proto}, FlagSNAT}} {
				if err := d.PutService(fe.fe, ServiceEntry{ID: uint32(fe.fe.Port), Flags: fe.flags, Slots: []uint32{1}}, ServiceEntry{}); err != nil {
					t.Fatal(err)
				}
			}
			// ClusterIP: DNAT and back.
			_, out := run(t, d, pkt{src: ap(client6, 40000), dst: ap(vip6, 80), proto: proto, tcpFlags: 0x02, payload: []byte("hello")}.bytes())
			expect(t, "ClusterIP forward", parse(t, out), ap(client6, 40000), ap(backend6A, 8080))
			_, out = run(t, d, pkt{src: ap(backend6A, 8080), dst: ap(client6, 40000), proto: proto, tcpFlags: 0x12, payload: []byte("world")}.bytes())
			expect(t, "ClusterIP reply", parse(t, out), ap(vip6, 80), ap(client6, 40000))

			// NodePort: SNAT to the node address; a client port outside
			// the SNAT range is translated.
			_, out = run(t, d, pkt{src: ap(ext6, 20000), dst: ap(node6, 30080), proto: proto, tcpFlags: 0x02}.bytes())
			fwd := parse(t, out)
			if fwd.src != node6 || fwd.dst != backend6A || fwd.sport < 32768 || fwd.sport > 60999 || !fwd.l4OK {
				t.Fatalf("NodePort forward %v:%d -> %v:%d (l4 ok %v), want %v:<32768-60999> -> %v", fwd.src, fwd.sport, fwd.dst, fwd.dport, fwd.l4OK, node6, backend6A)
			}
			_, out = run(t, d, pkt{src: ap(backend6A, 8080), dst: ap(node6, fwd.sport), proto: proto, tcpFlags: 0x12}.bytes())
			expect(t, "NodePort reply", parse(t, out), ap(node6, 30080), ap(ext6, 20000))

			// Hairpin: the backend reaching its own service.
			_, out = run(t, d, pkt{src: ap(backend6A, 50000), dst: ap(vip6, 80), proto: proto, tcpFlags: 0x02}.bytes())
			if h := parse(t, out); h.src != hairpin6 || h.dst != backend6A || !h.l4OK {
				t.Fatalf("hairpin %v -> %v (l4 ok %v), want %v -> %v", h.src, h.dst, h.l4OK, hairpin6, backend6A)
			}

			ss, _ := d.Sessions()
			if len(ss) != 6 {
				t.Fatalf("%d IPv6 session entries, want three pairs", len(ss))
			}
			// The IPv4 path is not confused by them.
			if ret, _ := run(t, d, pkt{src: ap(client, 40000), dst: ap(vip, 80), proto: proto, tcpFlags: 0x02}.bytes()); ret != actUnspc {
				t.Fatalf("IPv4 packet to an IPv6-only service: verdict %d, want not ours", int32(ret))
			}
		})
	}
}

// Without IPv6 in the constants the IPv6 maps hold one entry: a node that
// serves only IPv4 pays nothing for them.
func TestIPv6OffIsSmall(t *testing.T) {
	d := load(t, testConstants())
	info, err := d.objs.Sessions6.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.MaxEntries != 1 {
		t.Fatalf("sessions6 holds %d entries with IPv6 off, want 1", info.MaxEntries)
	}
}

// icmpError6 builds an ICMPv6 error from `from` to `to` quoting the start of
// the IPv6 packet inner (Ethernet frame), with its checksum.
func icmpError6(from, to netip.Addr, typ, code uint8, inner []byte) []byte {
	quote := inner[14:]
	if len(quote) > 48 {
		quote = quote[:48]
	}
	m := append([]byte{typ, code, 0, 0, 0, 0, 5, 0xdc}, quote...)
	binary.BigEndian.PutUint16(m[2:], csumFold(csumAdd(pseudo(from, to, 58, len(m)), m)))
	b := ether(ipv6(from, to, 58, m))
	b[12], b[13] = 0x86, 0xdd
	return b
}

// An ICMPv6 error about a translated flow (here from the backend; Packet
// Too Big from a router is handled the same) reaches the original sender
// with the addresses and ports it knows, and a valid checksum.
func TestICMPv6ErrorReverseTranslated(t *testing.T) {
	icmpFlow(t, testConstants6(), client6, vip6, ext6, node6, backend6A, func(t *testing.T, d *Datapath, src netip.AddrPort, fe Frontend) {
		_, query := run(t, d, pkt{src: src, dst: ap(fe.Addr, fe.Port), proto: UDP, payload: []byte("query")}.bytes())
		sent := parse(t, query)

		for _, typ := range []uint8{1, 2} { // port unreachable, packet too big
			ret, out := run(t, d, icmpError6(backend6A, sent.src, typ, 4, query))
			if ret != actOK {
				t.Fatalf("type %d: verdict %d", typ, int32(ret))
			}
			e := parse(t, out)
			if e.src != fe.Addr || e.dst != src.Addr() || !e.l4OK {
				t.Fatalf("type %d: outer %v -> %v (icmp ok %v), want %v -> %v", typ, e.src, e.dst, e.l4OK, fe.Addr, src.Addr())
			}
			q := e.l4[8:]
			qs, qd := netip.AddrFrom16([16]byte(q[8:24])), netip.AddrFrom16([16]byte(q[24:40]))
			qsp, qdp := binary.BigEndian.Uint16(q[40:]), binary.BigEndian.Uint16(q[42:])
			if ap(qs, qsp) != src || ap(qd, qdp) != ap(fe.Addr, fe.Port) {
				t.Fatalf("type %d: quoted %v:%d -> %v:%d, want %v -> %v", typ, qs, qsp, qd, qdp, src, ap(fe.Addr, fe.Port))
			}
		}
		if st, _ := d.Stats(); st.ICMPTranslated != 2 {
			t.Fatalf("icmp_translated = %d, want 2", st.ICMPTranslated)
		}
	})
}

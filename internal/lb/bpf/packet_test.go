// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// Just enough packet crafting and parsing for the unit tests: Ethernet +
// IPv4 (no options) + TCP/UDP/ICMP, with real checksums.

type pkt struct {
	src, dst   netip.AddrPort
	proto      Proto
	tcpFlags   uint8
	id         uint16
	fragOffset uint16 // in 8-byte units
	moreFrags  bool
	noL4       bool // later fragment: payload only
	payload    []byte
	udpNoCsum  bool
}

func csumAdd(sum uint32, b []byte) uint32 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	return sum
}

func csumFold(sum uint32) uint16 {
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func pseudo(src, dst netip.Addr, proto Proto, l4len int) uint32 {
	if src.Is6() {
		s, d := src.As16(), dst.As16()
		return csumAdd(csumAdd(0, s[:]), d[:]) + uint32(proto) + uint32(l4len)
	}
	s, d := src.As4(), dst.As4()
	sum := csumAdd(0, s[:])
	sum = csumAdd(sum, d[:])
	return sum + uint32(proto) + uint32(l4len)
}

func ipv6(src, dst netip.Addr, proto uint8, l4 []byte) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(l4)))
	h[6] = proto
	h[7] = 64
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(h, l4...)
}

func ipv4(src, dst netip.Addr, proto uint8, id uint16, frag uint16, l4 []byte) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(l4)))
	binary.BigEndian.PutUint16(h[4:], id)
	binary.BigEndian.PutUint16(h[6:], frag)
	h[8] = 64
	h[9] = proto
	s, d := src.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	binary.BigEndian.PutUint16(h[10:], csumFold(csumAdd(0, h)))
	return append(h, l4...)
}

func ether(ip []byte) []byte {
	e := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00}
	return append(e, ip...)
}

func (p pkt) l4() []byte {
	if p.noL4 {
		return p.payload
	}
	var h []byte
	switch p.proto {
	case TCP:
		h = make([]byte, 20)
		h[12] = 5 << 4
		h[13] = p.tcpFlags
		binary.BigEndian.PutUint16(h[14:], 65535)
	case UDP:
		h = make([]byte, 8)
		binary.BigEndian.PutUint16(h[4:], uint16(8+len(p.payload)))
	}
	binary.BigEndian.PutUint16(h[0:], p.src.Port())
	binary.BigEndian.PutUint16(h[2:], p.dst.Port())
	seg := append(h, p.payload...)
	if p.moreFrags || p.fragOffset != 0 {
		// A fragmented datagram's checksum covers all of it; the tests only
		// check that it changes consistently, so any value is fine here.
		return seg
	}
	off := 16
	if p.proto == UDP {
		off = 6
		if p.udpNoCsum {
			return seg
		}
	}
	c := csumFold(csumAdd(pseudo(p.src.Addr(), p.dst.Addr(), p.proto, len(seg)), seg))
	if c == 0 && p.proto == UDP {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(seg[off:], c)
	return seg
}

func (p pkt) bytes() []byte {
	if p.src.Addr().Is6() {
		b := ether(ipv6(p.src.Addr(), p.dst.Addr(), uint8(p.proto), p.l4()))
		b[12], b[13] = 0x86, 0xdd
		return b
	}
	frag := p.fragOffset
	if p.moreFrags {
		frag |= 0x2000
	}
	return ether(ipv4(p.src.Addr(), p.dst.Addr(), uint8(p.proto), p.id, frag, p.l4()))
}

// parsed is what the tests check in a packet the program returned.
type parsed struct {
	src, dst netip.Addr
	sport    uint16
	dport    uint16
	proto    uint8
	ttl      uint8
	ipOK     bool // header checksum valid
	l4OK     bool // TCP/UDP/ICMP checksum valid (unfragmented only)
	l4       []byte
}

func parse(t *testing.T, b []byte) parsed {
	t.Helper()
	if len(b) < 34 {
		t.Fatalf("packet of %d bytes is too short", len(b))
	}
	ip := b[14:]
	if b[12] == 0x86 && b[13] == 0xdd {
		ip = ip[:40+int(binary.BigEndian.Uint16(ip[4:]))]
		p := parsed{
			src: netip.AddrFrom16([16]byte(ip[8:24])), dst: netip.AddrFrom16([16]byte(ip[24:40])),
			proto: ip[6], ttl: ip[7], ipOK: true, l4: ip[40:],
		}
		p.sport = binary.BigEndian.Uint16(p.l4[0:])
		p.dport = binary.BigEndian.Uint16(p.l4[2:])
		p.l4OK = csumFold(csumAdd(pseudo(p.src, p.dst, Proto(p.proto), len(p.l4)), p.l4)) == 0
		return p
	}
	tot := int(binary.BigEndian.Uint16(ip[2:]))
	ip = ip[:tot]
	p := parsed{
		src:   netip.AddrFrom4([4]byte(ip[12:16])),
		dst:   netip.AddrFrom4([4]byte(ip[16:20])),
		proto: ip[9],
		ttl:   ip[8],
		ipOK:  csumFold(csumAdd(0, ip[:20])) == 0,
		l4:    ip[20:],
	}
	frag := binary.BigEndian.Uint16(ip[6:])
	if frag&0x1fff != 0 {
		return p
	}
	if p.proto == 6 || p.proto == 17 {
		p.sport = binary.BigEndian.Uint16(p.l4[0:])
		p.dport = binary.BigEndian.Uint16(p.l4[2:])
	}
	if frag&0x2000 != 0 {
		return p
	}
	switch p.proto {
	case 6, 17:
		if p.proto == 17 && binary.BigEndian.Uint16(p.l4[6:]) == 0 {
			p.l4OK = true // no checksum
			break
		}
		p.l4OK = csumFold(csumAdd(pseudo(p.src, p.dst, Proto(p.proto), len(p.l4)), p.l4)) == 0
	case 1:
		p.l4OK = csumFold(csumAdd(0, p.l4)) == 0
	}
	return p
}

// icmpError builds an ICMP error from `from` to `to` quoting the start of inner.
func icmpError(from, to netip.Addr, typ, code uint8, inner []byte) []byte {
	quote := inner[14:]
	if len(quote) > 28 {
		quote = quote[:28]
	}
	m := append([]byte{typ, code, 0, 0, 0, 0, 0, 0}, quote...)
	binary.BigEndian.PutUint16(m[2:], csumFold(csumAdd(0, m)))
	return ether(ipv4(from, to, 1, 7, 0, m))
}

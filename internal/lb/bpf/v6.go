// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"encoding/binary"
	"net/netip"
	"time"
)

// IPv6 addresses as the program stores them: 16 bytes in network order,
// read as four native words.
func addr6BE(a netip.Addr) [4]uint32 {
	b := a.As16()
	var w [4]uint32
	for i := range w {
		w[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return w
}

func addr6FromBE(w [4]uint32) netip.Addr {
	var b [16]byte
	for i, v := range w {
		binary.NativeEndian.PutUint32(b[4*i:], v)
	}
	return netip.AddrFrom16(b)
}

func (f Frontend) key6() lbSvcKey6 {
	return lbSvcKey6{Addr: addr6BE(f.Addr), Port: portBE(f.Port), Proto: uint8(f.Proto)}
}

func (f Flow) key6() lbFlow6 {
	return lbFlow6{
		Saddr: addr6BE(f.Src.Addr()), Daddr: addr6BE(f.Dst.Addr()),
		Sport: portBE(f.Src.Port()), Dport: portBE(f.Dst.Port()), Proto: uint8(f.Proto),
	}
}

func sessionFrom6(k lbFlow6, v lbSession6) Session {
	return Session{
		Key: Flow{
			Src:   netip.AddrPortFrom(addr6FromBE(k.Saddr), portFromBE(k.Sport)),
			Dst:   netip.AddrPortFrom(addr6FromBE(k.Daddr), portFromBE(k.Dport)),
			Proto: Proto(k.Proto),
		},
		To: Flow{
			Src:   netip.AddrPortFrom(addr6FromBE(v.Saddr), portFromBE(v.Sport)),
			Dst:   netip.AddrPortFrom(addr6FromBE(v.Daddr), portFromBE(v.Dport)),
			Proto: Proto(k.Proto),
		},
		BackendID: v.BackendId,
		LastSeen:  time.Duration(v.LastSeen),
		Reply:     v.Flags&1 != 0,
		SNAT:      v.Flags&2 != 0,
		Closing:   v.Flags&4 != 0,
	}
}

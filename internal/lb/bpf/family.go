// SPDX-License-Identifier: Apache-2.0

package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"structs"
	"time"

	"github.com/cilium/ebpf"
)

// One code path for both address families. The program keeps each family's
// services, backends and sessions in maps of its own, whose keys and values
// differ only in the address: one word for IPv4, four for IPv6 (lb.h). The
// types below are those shapes over the address type A; the conversions
// under them compile only while each instance is the type bpf2go generates
// for that family, so lb.h cannot drift from them unnoticed.

// addrWords is an address as the program stores it: network byte order in
// memory, read as native words.
type addrWords interface{ uint32 | [4]uint32 }

type svcKey[A addrWords] struct {
	_     structs.HostLayout
	Addr  A
	Port  uint16
	Proto uint8
	Pad   uint8
}

type backendVal[A addrWords] struct {
	_    structs.HostLayout
	Addr A
	Port uint16
	Pad  uint16
}

type flowKey[A addrWords] struct {
	_            structs.HostLayout
	Saddr, Daddr A
	Sport, Dport uint16
	Proto        uint8
	Pad          [3]uint8
}

type sessionVal[A addrWords] struct {
	_            structs.HostLayout
	Saddr, Daddr A
	Sport, Dport uint16
	BackendId    uint32
	LastSeen     uint64
	Flags, Pad   uint32
}

type srcRangeKey[A addrWords] struct {
	_         structs.HostLayout
	Prefixlen uint32 // 32 (SvcId) + the prefix's bits
	SvcId     uint32
	Addr      A
}

var (
	_ = lbSrcRangeKey(srcRangeKey[uint32]{})
	_ = lbSrcRangeKey6(srcRangeKey[[4]uint32]{})
	_ = lbSvcKey(svcKey[uint32]{})
	_ = lbSvcKey6(svcKey[[4]uint32]{})
	_ = lbBackend(backendVal[uint32]{})
	_ = lbBackend6(backendVal[[4]uint32]{})
	_ = lbFlow(flowKey[uint32]{})
	_ = lbFlow6(flowKey[[4]uint32]{})
	_ = lbSession(sessionVal[uint32]{})
	_ = lbSession6(sessionVal[[4]uint32]{})
)

// svcValue is a family's svc_val: not one shape over the address, since
// the IPv4 one is padded.
type svcValue interface {
	lbSvcVal | lbSvcVal6
	entry() ServiceEntry
}

func (v lbSvcVal) entry() ServiceEntry {
	return serviceEntry(v.Id, v.Count, v.Flags, v.AffinitySec, v.SnatAddr)
}

func (v lbSvcVal6) entry() ServiceEntry {
	return serviceEntry(v.Id, v.Count, v.Flags, v.AffinitySec, v.SnatAddr)
}

func serviceEntry[A addrWords](id, count, flags, affinitySec uint32, snat A) ServiceEntry {
	e := ServiceEntry{ID: id, Flags: ServiceFlags(flags), AffinitySec: affinitySec, Slots: make([]uint32, count)}
	if snat != *new(A) {
		e.SNATAddr = addrOf(snat)
	}
	return e
}

func svcValOf[V svcValue](e ServiceEntry) V {
	var v V
	switch p := any(&v).(type) {
	case *lbSvcVal:
		*p = lbSvcVal{Id: e.ID, Count: uint32(len(e.Slots)), Flags: uint32(e.Flags), AffinitySec: e.AffinitySec, SnatAddr: wordsOf[uint32](e.SNATAddr)}
	case *lbSvcVal6:
		*p = lbSvcVal6{Id: e.ID, Count: uint32(len(e.Slots)), Flags: uint32(e.Flags), AffinitySec: e.AffinitySec, SnatAddr: wordsOf[[4]uint32](e.SNATAddr)}
	}
	return v
}

// wordsOf is a as the program stores it; an invalid address is all zero.
func wordsOf[A addrWords](a netip.Addr) A {
	var w A
	if !a.IsValid() {
		return w
	}
	switch p := any(&w).(type) {
	case *uint32:
		*p = addrBE(a)
	case *[4]uint32:
		*p = addr6BE(a)
	}
	return w
}

func addrOf[A addrWords](w A) netip.Addr {
	switch v := any(w).(type) {
	case uint32:
		return addrFromBE(v)
	case [4]uint32:
		return addr6FromBE(v)
	}
	panic("unreachable")
}

// addr6BE is an IPv6 address as the program stores it: 16 bytes in network
// order, read as four native words.
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

func svcKeyOf[A addrWords](fe Frontend) svcKey[A] {
	return svcKey[A]{Addr: wordsOf[A](fe.Addr), Port: portBE(fe.Port), Proto: uint8(fe.Proto)}
}

func (k svcKey[A]) frontend() Frontend {
	return Frontend{Addr: addrOf(k.Addr), Port: portFromBE(k.Port), Proto: Proto(k.Proto)}
}

func flowKeyOf[A addrWords](f Flow) flowKey[A] {
	return flowKey[A]{
		Saddr: wordsOf[A](f.Src.Addr()), Daddr: wordsOf[A](f.Dst.Addr()),
		Sport: portBE(f.Src.Port()), Dport: portBE(f.Dst.Port()), Proto: uint8(f.Proto),
	}
}

func (k flowKey[A]) flow() Flow {
	return Flow{
		Src:   netip.AddrPortFrom(addrOf(k.Saddr), portFromBE(k.Sport)),
		Dst:   netip.AddrPortFrom(addrOf(k.Daddr), portFromBE(k.Dport)),
		Proto: Proto(k.Proto),
	}
}

// struct session flags (SESS_F_* in lb.h).
const (
	sessReply   = 0x1
	sessSNAT    = 0x2
	sessClosing = 0x4
)

func sessionOf[A addrWords](k flowKey[A], v sessionVal[A]) Session {
	to := flowKey[A]{Saddr: v.Saddr, Daddr: v.Daddr, Sport: v.Sport, Dport: v.Dport, Proto: k.Proto}
	return Session{
		Key:       k.flow(),
		To:        to.flow(),
		BackendID: v.BackendId,
		LastSeen:  time.Duration(v.LastSeen),
		Reply:     v.Flags&sessReply != 0,
		SNAT:      v.Flags&sessSNAT != 0,
		Closing:   v.Flags&sessClosing != 0,
	}
}

func sessionValOf[A addrWords](s Session) sessionVal[A] {
	to := flowKeyOf[A](s.To)
	v := sessionVal[A]{Saddr: to.Saddr, Daddr: to.Daddr, Sport: to.Sport, Dport: to.Dport, BackendId: s.BackendID, LastSeen: uint64(s.LastSeen)}
	for _, f := range []struct {
		on   bool
		flag uint32
	}{{s.Reply, sessReply}, {s.SNAT, sessSNAT}, {s.Closing, sessClosing}} {
		if f.on {
			v.Flags |= f.flag
		}
	}
	return v
}

// family is one address family's maps: A is its address, V its svc_val.
type family[A addrWords, V svcValue] struct {
	name                                     string // in errors: "" or "IPv6 "
	number                                   uint32 // sweep_args.family
	services, backends, sessions, sweepBatch *ebpf.Map
	srcRanges                                *ebpf.Map
}

func (d *Datapath) v4() family[uint32, lbSvcVal] {
	o := &d.objs
	return family[uint32, lbSvcVal]{"", 4, o.Services, o.Backends, o.Sessions, o.SweepBatch, o.SrcRanges}
}

func (d *Datapath) v6() family[[4]uint32, lbSvcVal6] {
	o := &d.objs
	return family[[4]uint32, lbSvcVal6]{"IPv6 ", 6, o.Services6, o.Backends6, o.Sessions6, o.SweepBatch6, o.SrcRanges6}
}

func (f family[A, V]) putBackend(id uint32, ap netip.AddrPort) error {
	return f.backends.Put(id, backendVal[A]{Addr: wordsOf[A](ap.Addr().Unmap()), Port: portBE(ap.Port())})
}

func (f family[A, V]) putService(fe Frontend, e ServiceEntry) error {
	return f.services.Put(svcKeyOf[A](fe), svcValOf[V](e))
}

func (f family[A, V]) deleteService(fe Frontend) error {
	return f.services.Delete(svcKeyOf[A](fe))
}

// readServices adds the family's frontends to fes and byID (by service id);
// their slots are read apart.
func (f family[A, V]) readServices(fes map[Frontend]ServiceEntry, byID map[uint32]Frontend) error {
	var k svcKey[A]
	var v V
	it := f.services.Iterate()
	for it.Next(&k, &v) {
		e := v.entry()
		fes[k.frontend()] = e
		byID[e.ID] = k.frontend()
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %sservices: %w", f.name, err)
	}
	return nil
}

func srcRangeKeyOf[A addrWords](id uint32, p netip.Prefix) srcRangeKey[A] {
	p = p.Masked()
	return srcRangeKey[A]{Prefixlen: 32 + uint32(p.Bits()), SvcId: id, Addr: wordsOf[A](p.Addr())}
}

// changeRange puts (add) or deletes source range p of service id.
func (f family[A, V]) changeRange(id uint32, p netip.Prefix, add bool) error {
	k := srcRangeKeyOf[A](id, p)
	if add {
		return f.srcRanges.Put(k, uint8(1))
	}
	if err := f.srcRanges.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// readRanges adds the family's source ranges to the frontends of fes (by
// service id) and deletes those of no frontend (an interrupted apply).
func (f family[A, V]) readRanges(fes map[Frontend]ServiceEntry, byID map[uint32]Frontend) error {
	var k srcRangeKey[A]
	var one uint8
	var orphans []srcRangeKey[A]
	it := f.srcRanges.Iterate()
	for it.Next(&k, &one) {
		fe, ok := byID[k.SvcId]
		if !ok || k.Prefixlen < 32 || fes[fe].Flags&FlagSourceRanges == 0 {
			orphans = append(orphans, k)
			continue
		}
		e := fes[fe]
		e.SourceRanges = append(e.SourceRanges, netip.PrefixFrom(addrOf(k.Addr), int(k.Prefixlen-32)))
		fes[fe] = e
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %ssource ranges: %w", f.name, err)
	}
	for _, k := range orphans {
		if err := f.srcRanges.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete orphan %ssource range of service %d: %w", f.name, k.SvcId, err)
		}
	}
	return nil
}

func (f family[A, V]) readBackends(bes map[uint32]netip.AddrPort) error {
	var id uint32
	var b backendVal[A]
	it := f.backends.Iterate()
	for it.Next(&id, &b) {
		bes[id] = netip.AddrPortFrom(addrOf(b.Addr), portFromBE(b.Port))
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %sbackends: %w", f.name, err)
	}
	return nil
}

func (f family[A, V]) readSessions(out *[]Session) error {
	err := readAll(f.sessions, 0, func(k flowKey[A], v sessionVal[A]) { *out = append(*out, sessionOf(k, v)) })
	if err != nil {
		return fmt.Errorf("read %ssessions: %w", f.name, err)
	}
	return nil
}

func (f family[A, V]) putSession(s Session) error {
	return f.sessions.Put(flowKeyOf[A](s.Key), sessionValOf[A](s))
}

func (f family[A, V]) deleteSession(fl Flow) error {
	if err := f.sessions.Delete(flowKeyOf[A](fl)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return err
	}
	return nil
}

// sweepCandidates reads the family's sessions and returns how many forward
// entries (connections) it holds and the keys of the entries last seen
// before oldest.
func (f family[A, V]) sweepCandidates(oldest time.Duration) (conns int, keys []flowKey[A], err error) {
	err = readAll(f.sessions, sweepPause, func(k flowKey[A], v sessionVal[A]) {
		if v.Flags&sessReply == 0 {
			conns++
		}
		if time.Duration(v.LastSeen) < oldest {
			keys = append(keys, k)
		}
	})
	if err != nil {
		return 0, nil, fmt.Errorf("read %ssessions: %w", f.name, err)
	}
	return conns, keys, nil
}

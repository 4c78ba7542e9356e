// SPDX-License-Identifier: Apache-2.0

// Package bpf loads the load balancer's tc program (lb.bpf.c) and the socket
// programs for the node's own connections (sock.bpf.c) over one set of maps,
// and reads and writes those maps. It knows the map layouts and nothing about where services
// come from. A Datapath is safe for concurrent use: every method is a single
// map operation or a sequence whose intermediate states the program
// tolerates (see PutService).
package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"time"

	"github.com/cilium/ebpf"
)

// Proto is an IP protocol number the program translates.
type Proto uint8

const (
	TCP Proto = 6
	UDP Proto = 17
)

func (p Proto) String() string {
	switch p {
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	}
	return fmt.Sprintf("proto(%d)", uint8(p))
}

// LastSeenGrain is how stale the program lets a session's last_seen get
// before rewriting it; Sweep adds it to every idle timeout.
const LastSeenGrain = time.Second

// SNATTries is the most ports one allocation tries (SNAT_TRIES in lb.h).
const SNATTries = 16

// Constants are fixed when the program is loaded.
type Constants struct {
	SNATPortMin, SNATPortMax uint16 // inclusive; must not overlap the NodePort range
	NodePortMin, NodePortMax uint16
	HairpinAddr              netip.Addr // IPv4 source for a backend reaching its own service
	// IPv6 sizes the IPv6 maps like the IPv4 ones (off: one entry each, so
	// an IPv4-only node pays no memory for them; IPv6 frontends are refused).
	IPv6           bool
	HairpinAddr6   netip.Addr // IPv6 hairpin source; invalid: IPv6 hairpin connections are dropped
	FIBRedirect    bool       // false only in unit tests: leave forwarding to the stack
	SessionEntries uint32     // LRU capacity, two entries per connection; 0 = default
	// PinDir, on a bpf filesystem, keeps the maps (and, via AttachIngress,
	// the attachments) across restarts; see pin.go. Empty: they live and die
	// with the process.
	PinDir string
}

// Validate names the offending field and how to fix it.
func (c Constants) Validate() error {
	if c.SNATPortMin == 0 || c.SNATPortMin > c.SNATPortMax {
		return fmt.Errorf("SNAT port range %d-%d: min must be >0 and <= max", c.SNATPortMin, c.SNATPortMax)
	}
	if c.NodePortMin > c.NodePortMax {
		return fmt.Errorf("NodePort range %d-%d: min must be <= max", c.NodePortMin, c.NodePortMax)
	}
	if c.SNATPortMin <= c.NodePortMax && c.NodePortMin <= c.SNATPortMax {
		return fmt.Errorf("SNAT port range %d-%d overlaps NodePort range %d-%d: move the SNAT range (e.g. 32768-60999)",
			c.SNATPortMin, c.SNATPortMax, c.NodePortMin, c.NodePortMax)
	}
	if c.HairpinAddr6.IsValid() && (!c.HairpinAddr6.Is6() || c.HairpinAddr6.Is4In6()) {
		return fmt.Errorf("IPv6 hairpin address %v: must be an IPv6 address reserved for hairpin SNAT (e.g. fd00:5c:1::1)", c.HairpinAddr6)
	}
	if !c.HairpinAddr.Is4() {
		return fmt.Errorf("hairpin address %v: must be an IPv4 address reserved for hairpin SNAT (e.g. 169.254.42.1)", c.HairpinAddr)
	}
	return nil
}

// Datapath is the loaded programs and their maps.
type Datapath struct {
	objs     lbObjects   // the tc program, the sweep and every map they use
	sock     sockObjects // the socket programs; the maps they share are objs's
	mapDirs  []string    // where the maps are pinned; none if not
	replaced []string    // pinned maps that could not be reused (why)

	afterSweepRead func() // tests: runs between Sweep's read and its delete
}

// Load sets the constants and loads the programs into the kernel: the tc
// collection, then the socket collection over the tc collection's maps. On
// a verifier rejection the error wraps *ebpf.VerifierError.
func Load(c Constants) (*Datapath, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	spec, err := loadLb()
	if err != nil {
		return nil, err
	}
	set := map[string]any{
		lbVarSnatPortMin:     c.SNATPortMin,
		lbVarSnatPortMax:     c.SNATPortMax,
		lbVarNodeportMin:     c.NodePortMin,
		lbVarNodeportMax:     c.NodePortMax,
		lbVarHairpinAddr:     addrBE(c.HairpinAddr),
		lbVarFibRedirect:     c.FIBRedirect,
		lbVarLastSeenGrainNs: uint64(LastSeenGrain),
	}
	if c.HairpinAddr6.IsValid() {
		set[lbVarHairpinAddr6] = addr6BE(c.HairpinAddr6)
	}
	for name, v := range set {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}
	sockSpec, err := loadSock()
	if err != nil {
		return nil, err
	}
	// Sized alike, or the shared maps would not match the socket
	// collection's specs they replace.
	c.size(spec)
	c.size(sockSpec)
	d := &Datapath{}
	tc, err := d.load(spec, &d.objs, c.PinDir, nil)
	if err != nil {
		return nil, fmt.Errorf("load lb program: %w", err)
	}
	if _, err := d.load(sockSpec, &d.sock, c.PinDir, sharedMaps(sockSpec, tc)); err != nil {
		d.objs.Close()
		return nil, fmt.Errorf("load socket programs: %w", err)
	}
	return d, nil
}

// size sets the capacities c asks for on the maps of spec that have them.
func (c Constants) size(spec *ebpf.CollectionSpec) {
	set := func(n uint32, names ...string) {
		for _, name := range names {
			if ms := spec.Maps[name]; ms != nil {
				ms.MaxEntries = n
			}
		}
	}
	if c.SessionEntries > 0 {
		set(c.SessionEntries, lbMapSessions, lbMapSessions6)
		// At most one affinity entry per connection's client is live.
		set(max(c.SessionEntries/2, 1), lbMapAffinity, lbMapAffinity6)
	}
	if !c.IPv6 {
		set(1, lbMapServices6, lbMapBackends6, lbMapSessions6, lbMapAffinity6, lbMapSrcRanges6, sockMapSockRev6)
	}
}

// sharedMaps are the maps of loaded, by name, that spec defines too (those
// of maps.h); its constants and globals stay its own.
func sharedMaps(spec *ebpf.CollectionSpec, loaded map[string]*ebpf.Map) map[string]*ebpf.Map {
	shared := map[string]*ebpf.Map{}
	for name := range spec.Maps {
		if m := loaded[name]; m != nil && !strings.HasPrefix(name, ".") {
			shared[name] = m
		}
	}
	return shared
}

// load loads spec into objs, a generated *Objects struct, with the maps of
// shared in place of its own and, with a pin directory, its other pinned
// maps opened or created there. It returns the collection's maps by name
// (now owned by objs).
func (d *Datapath) load(spec *ebpf.CollectionSpec, objs any, pinDir string, shared map[string]*ebpf.Map) (map[string]*ebpf.Map, error) {
	replace := maps.Clone(shared)
	if pinDir != "" {
		pinned, dirs, replaced, err := openPinned(spec, pinDir, shared)
		if err != nil {
			return nil, err
		}
		// The collection takes clones; ours are only needed to load.
		defer func() {
			for _, m := range pinned {
				m.Close()
			}
		}()
		d.mapDirs = append(d.mapDirs, dirs...)
		d.replaced = append(d.replaced, replaced...)
		if replace == nil {
			replace = map[string]*ebpf.Map{}
		}
		maps.Copy(replace, pinned)
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: replace})
	if err != nil {
		return nil, err
	}
	loaded := maps.Clone(coll.Maps)
	if err := coll.Assign(objs); err != nil {
		coll.Close()
		return nil, err
	}
	return loaded, nil
}

// PinnedMaps lists the directories the maps are pinned in (none without
// pinning), and the pinned maps that could not be reused and start empty,
// each with the reason.
func (d *Datapath) PinnedMaps() (dirs, replaced []string) { return d.mapDirs, d.replaced }

// Close releases the program and maps (attachments hold their own references).
func (d *Datapath) Close() error { return errors.Join(d.sock.Close(), d.objs.Close()) }

// Program is the tc ingress program to attach.
func (d *Datapath) Program() *ebpf.Program { return d.objs.LbIngress }

// addrBE is an IPv4 address as the program stores it: network byte order in
// memory, read as a native uint32.
func addrBE(a netip.Addr) uint32 {
	b := a.As4()
	return binary.NativeEndian.Uint32(b[:])
}

func addrFromBE(v uint32) netip.Addr {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

func portBE(p uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], p)
	return binary.NativeEndian.Uint16(b[:])
}

func portFromBE(v uint16) uint16 {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], v)
	return binary.BigEndian.Uint16(b[:])
}

// Frontend is what clients connect to: ClusterIP:port or nodeAddress:nodePort.
type Frontend struct {
	Addr  netip.Addr
	Port  uint16
	Proto Proto
}

func (f Frontend) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(f.Addr, f.Port), f.Proto)
}

// PutBackend adds or replaces backend id. Replacing the address makes
// existing sessions to the old address re-balance on their next packet.
func (d *Datapath) PutBackend(id uint32, ap netip.AddrPort) error {
	var err error
	if ap.Addr().Unmap().Is4() {
		err = d.v4().putBackend(id, ap)
	} else {
		err = d.v6().putBackend(id, ap)
	}
	if err != nil {
		return fmt.Errorf("put backend %d (%v): %w", id, ap, err)
	}
	return nil
}

// DeleteBackend removes backend id; its sessions re-balance on their next
// forward packet, and replies still in flight are still translated.
func (d *Datapath) DeleteBackend(id uint32) error {
	for _, m := range []*ebpf.Map{d.objs.Backends, d.objs.Backends6} {
		if err := m.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete backend %d: %w", id, err)
		}
	}
	return nil
}

// ServiceFlags are svc_val.flags (SVC_F_* in lb.h).
type ServiceFlags uint32

const (
	// FlagSNAT rewrites the source to ServiceEntry.SNATAddr, or to the
	// frontend's own address when that is unset (NodePort).
	FlagSNAT ServiceFlags = 0x1
	// FlagMaglev makes the program index the slots by a hash of the flow's
	// 5-tuple instead of a random number; the slots are then a Maglev table.
	FlagMaglev ServiceFlags = 0x2
	// FlagSourceRanges lets new connections in only from a client inside
	// ServiceEntry.SourceRanges (none: from nobody).
	FlagSourceRanges ServiceFlags = 0x4
)

// PutService points frontend fe at e.Slots (backend ids in slot order; one
// backend may fill many slots). old is what the frontend had (zero if new;
// the ID must not change). Slots are written before the count grows and
// deleted after it shrinks, so a concurrent packet never reads a slot beyond
// the count it saw, except a shrink race which the program resolves by
// falling back to slot 0. Affinity members and source ranges are added
// before and removed after the service entry changes, for the same reason:
// a frontend whose ranges change admits the union of both for that moment,
// never more, and one that gains the flag has its ranges already.
func (d *Datapath) PutService(fe Frontend, e, old ServiceEntry) error {
	if e.SNATAddr.IsValid() && e.SNATAddr.Is4() != fe.Addr.Is4() {
		return fmt.Errorf("frontend %v: SNAT address %v: must be of the frontend's family", fe, e.SNATAddr)
	}
	for _, p := range e.SourceRanges {
		if p.Addr().Is4() != fe.Addr.Is4() {
			return fmt.Errorf("frontend %v: source range %v: must be of the frontend's family", fe, p)
		}
	}
	ranges, oldRanges := e.ranges(), old.ranges()
	if err := d.changeRanges(fe, e.ID, ranges, oldRanges, true); err != nil {
		return err
	}
	for i, b := range e.Slots {
		if err := d.objs.BackendSlots.Put(lbSlotKey{SvcId: e.ID, Slot: uint32(i)}, b); err != nil {
			return fmt.Errorf("service %v slot %d: %w", fe, i, err)
		}
	}
	now, before := e.members(), old.members()
	for id := range now {
		if !before[id] {
			if err := d.objs.SvcMembers.Put(lbMemberKey{SvcId: e.ID, BackendId: id}, uint8(1)); err != nil {
				return fmt.Errorf("service %v affinity member %d: %w", fe, id, err)
			}
		}
	}
	var err error
	if fe.Addr.Is4() {
		err = d.v4().putService(fe, e)
	} else {
		err = d.v6().putService(fe, e)
	}
	if err != nil {
		return fmt.Errorf("service %v: %w", fe, err)
	}
	for id := range before {
		if !now[id] {
			if err := d.deleteMember(e.ID, id); err != nil {
				return err
			}
		}
	}
	if err := d.changeRanges(fe, e.ID, oldRanges, ranges, false); err != nil {
		return err
	}
	return d.deleteSlots(e.ID, len(e.Slots), len(old.Slots))
}

// ranges are the prefixes the source-range map holds for the entry: its
// SourceRanges with the flag, masked; none without it.
func (e ServiceEntry) ranges() map[netip.Prefix]bool {
	m := map[netip.Prefix]bool{}
	if e.Flags&FlagSourceRanges == 0 {
		return m
	}
	for _, p := range e.SourceRanges {
		m[p.Masked()] = true
	}
	return m
}

// changeRanges puts (add) or deletes the prefixes of a that b lacks.
func (d *Datapath) changeRanges(fe Frontend, id uint32, a, b map[netip.Prefix]bool, add bool) error {
	change := d.v4().changeRange
	if !fe.Addr.Is4() {
		change = d.v6().changeRange
	}
	for p := range a {
		if b[p] {
			continue
		}
		if err := change(id, p, add); err != nil {
			return fmt.Errorf("service %v source range %v: %w", fe, p, err)
		}
	}
	return nil
}

// members are the backends an affinity entry may still point at.
func (e ServiceEntry) members() map[uint32]bool {
	m := map[uint32]bool{}
	if e.AffinitySec == 0 {
		return m
	}
	for _, id := range e.Slots {
		m[id] = true
	}
	return m
}

func (d *Datapath) deleteMember(svc, backend uint32) error {
	err := d.objs.SvcMembers.Delete(lbMemberKey{SvcId: svc, BackendId: backend})
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete affinity member %d of service %d: %w", backend, svc, err)
	}
	return nil
}

// DeleteService removes frontend fe, its slots and affinity members; old is
// what it had.
func (d *Datapath) DeleteService(fe Frontend, old ServiceEntry) error {
	var err error
	if fe.Addr.Is4() {
		err = d.v4().deleteService(fe)
	} else {
		err = d.v6().deleteService(fe)
	}
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete service %v: %w", fe, err)
	}
	for id := range old.members() {
		if err := d.deleteMember(old.ID, id); err != nil {
			return err
		}
	}
	if err := d.changeRanges(fe, old.ID, old.ranges(), nil, false); err != nil {
		return err
	}
	return d.deleteSlots(old.ID, 0, len(old.Slots))
}

func (d *Datapath) deleteSlots(id uint32, from, to int) error {
	for i := from; i < to; i++ {
		err := d.objs.BackendSlots.Delete(lbSlotKey{SvcId: id, Slot: uint32(i)})
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete slot %d of service %d: %w", i, id, err)
		}
	}
	return nil
}

// SetPeerInterface marks ifindex as a veth whose peer lives in another
// namespace, so translated packets are handed straight to the peer.
func (d *Datapath) SetPeerInterface(ifindex int, on bool) error {
	var err error
	if on {
		err = d.objs.PeerIfaces.Put(uint32(ifindex), uint8(1))
	} else if err = d.objs.PeerIfaces.Delete(uint32(ifindex)); errors.Is(err, ebpf.ErrKeyNotExist) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("peer interface %d: %w", ifindex, err)
	}
	return nil
}

// ServiceEntry is one frontend as the maps hold it.
type ServiceEntry struct {
	ID          uint32
	Flags       ServiceFlags
	AffinitySec uint32     // ClientIP affinity timeout in seconds; 0: none
	SNATAddr    netip.Addr // FlagSNAT source; invalid: the frontend address
	Slots       []uint32   // backend id per slot 0..count-1; 0 where a slot is missing
	// SourceRanges are the client prefixes FlagSourceRanges admits, of the
	// frontend's family (Programmed returns them masked, in no order).
	SourceRanges []netip.Prefix
}

// Programmed reads back what the maps hold, which after a restart with
// pinned maps is what the previous process programmed, and deletes slots
// that no frontend reaches (an apply interrupted by a crash).
func (d *Datapath) Programmed() (map[Frontend]ServiceEntry, map[uint32]netip.AddrPort, error) {
	fes := map[Frontend]ServiceEntry{}
	byID := map[uint32]Frontend{}
	if err := errors.Join(d.v4().readServices(fes, byID), d.v6().readServices(fes, byID)); err != nil {
		return nil, nil, err
	}
	var sk lbSlotKey
	var bid uint32
	var orphans []lbSlotKey
	sit := d.objs.BackendSlots.Iterate()
	for sit.Next(&sk, &bid) {
		fe, ok := byID[sk.SvcId]
		if !ok || sk.Slot >= uint32(len(fes[fe].Slots)) {
			orphans = append(orphans, sk)
			continue
		}
		fes[fe].Slots[sk.Slot] = bid
	}
	if err := sit.Err(); err != nil {
		return nil, nil, fmt.Errorf("read backend slots: %w", err)
	}
	for _, o := range orphans {
		if err := d.objs.BackendSlots.Delete(o); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, nil, fmt.Errorf("delete orphan slot %d of service %d: %w", o.Slot, o.SvcId, err)
		}
	}
	// Members are derived from the slots; drop any an interrupted apply left.
	var mk lbMemberKey
	var one uint8
	var stale []lbMemberKey
	mit := d.objs.SvcMembers.Iterate()
	for mit.Next(&mk, &one) {
		fe, ok := byID[mk.SvcId]
		if !ok || !fes[fe].members()[mk.BackendId] {
			stale = append(stale, mk)
		}
	}
	if err := mit.Err(); err != nil {
		return nil, nil, fmt.Errorf("read affinity members: %w", err)
	}
	for _, m := range stale {
		if err := d.deleteMember(m.SvcId, m.BackendId); err != nil {
			return nil, nil, err
		}
	}
	if err := errors.Join(d.v4().readRanges(fes, byID), d.v6().readRanges(fes, byID)); err != nil {
		return nil, nil, err
	}
	bes := map[uint32]netip.AddrPort{}
	if err := errors.Join(d.v4().readBackends(bes), d.v6().readBackends(bes)); err != nil {
		return nil, nil, err
	}
	return fes, bes, nil
}

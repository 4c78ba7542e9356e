// SPDX-License-Identifier: Apache-2.0

// Package balancer is the control side of the service load balancer: it
// turns a services.Config into datapath map entries, changing only what
// differs from what is already programmed, attaches the program to the
// configured interfaces and garbage-collects idle sessions.
//
// Methods are safe for concurrent use. Interface attachment resolves names
// in the network namespace of the calling OS thread.
package balancer

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/swiftlane/swiftlane/internal/lb/bpf"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// Balancer owns one loaded datapath.
type Balancer struct {
	dp  *bpf.Datapath
	log *slog.Logger

	mu          sync.Mutex
	cfg         *services.Config
	programmed  map[bpf.Frontend]frontendState
	backendIDs  map[netip.AddrPort]uint32
	nextSvc     uint32
	nextBackend uint32
	links       map[int]bpf.Attachment // by ifindex
	live        int                    // connections at the last sweep
	pinDir      string
	ipv6        bool // the IPv6 maps have room (node setting, fixed at load)
	// nl talks to the network namespace of the attached interfaces (set by
	// the first AttachInterfaces), where backends' neighbours are resolved.
	nl     *netlink.Handle
	neighs map[netip.Addr]neighEntry // managed entries we created, by backend
}

// neighEntry is a managed neighbour entry made for a backend: the next hop
// towards it on the interface its route uses.
type neighEntry struct {
	link int
	hop  netip.Addr
}

type frontendState struct {
	id       uint32
	flags    bpf.ServiceFlags
	affinity uint32         // seconds
	snatAddr netip.Addr     // invalid: the frontend's own address
	slots    []uint32       // backend id per selection slot
	ranges   []netip.Prefix // with bpf.FlagSourceRanges: the clients admitted
}

func (f frontendState) entry() bpf.ServiceEntry {
	return bpf.ServiceEntry{ID: f.id, Flags: f.flags, AffinitySec: f.affinity, SNATAddr: f.snatAddr, Slots: f.slots, SourceRanges: f.ranges}
}

// same reports whether programming g over f would change nothing.
func (f frontendState) same(g frontendState) bool {
	return f.flags == g.flags && f.affinity == g.affinity && f.snatAddr == g.snatAddr &&
		slices.Equal(f.slots, g.slots) && samePrefixes(f.ranges, g.ranges)
}

func samePrefixes(a, b []netip.Prefix) bool {
	set := func(ps []netip.Prefix) map[netip.Prefix]bool {
		m := map[netip.Prefix]bool{}
		for _, p := range ps {
			m[p.Masked()] = true
		}
		return m
	}
	return maps.Equal(set(a), set(b))
}

// Changes counts the map writes one Apply made.
type Changes struct {
	ServicesPut, ServicesDeleted, BackendsPut, BackendsDeleted int
}

func (c Changes) String() string {
	return fmt.Sprintf("services +%d -%d, backends +%d -%d", c.ServicesPut, c.ServicesDeleted, c.BackendsPut, c.BackendsDeleted)
}

// Options are how a Balancer is opened beyond the node settings.
type Options struct {
	Log *slog.Logger
	// PinDir (on a bpf filesystem) keeps sessions, services and the
	// interface attachments across restarts: the next Balancer opened with
	// the same PinDir takes them over without dropping a connection, and
	// Close leaves the program attached. Empty: Close detaches and the
	// state is gone.
	PinDir string
	// Deferred leaves the programmed services as they are (pinned ones
	// keep serving) until the first Apply, for sources that need time to
	// produce a complete view (Kubernetes: synced caches). Otherwise Open
	// applies cfg's services at once.
	Deferred bool
	// noRedirect leaves forwarding to the stack (tests that read packets back).
	noRedirect bool
}

// New loads the datapath with the node settings from cfg and programs its
// services, without pinning. Node settings (ports, hairpin address, session
// capacity) are fixed for the Balancer's lifetime.
func New(cfg *services.Config, log *slog.Logger) (*Balancer, error) {
	return Open(cfg, Options{Log: log})
}

// Open is New with Options. With a PinDir that holds a previous instance's
// maps it adopts what they program (frontends, backend ids), so the first
// Apply rewrites only what differs.
func Open(cfg *services.Config, o Options) (*Balancer, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dp, err := bpf.Load(bpf.Constants{
		SNATPortMin: cfg.SNATPorts.Min, SNATPortMax: cfg.SNATPorts.Max,
		NodePortMin: cfg.NodePortRange.Min, NodePortMax: cfg.NodePortRange.Max,
		HairpinAddr: cfg.HairpinAddress, FIBRedirect: !o.noRedirect,
		IPv6: cfg.IPv6, HairpinAddr6: cfg.HairpinAddress6,
		SessionEntries: 2 * cfg.Sessions.Max, PinDir: o.PinDir,
	})
	if err != nil {
		return nil, err
	}
	b := &Balancer{
		dp: dp, log: log, cfg: cfg, pinDir: o.PinDir, ipv6: cfg.IPv6,
		programmed: map[bpf.Frontend]frontendState{},
		backendIDs: map[netip.AddrPort]uint32{},
		links:      map[int]bpf.Attachment{},
		neighs:     map[netip.Addr]neighEntry{},
	}
	if o.PinDir != "" {
		_, replaced := dp.PinnedMaps()
		for _, r := range replaced {
			log.Warn("pinned map not reusable, starting it empty", "map", r)
		}
		if err := b.adopt(); err != nil {
			dp.Close()
			return nil, err
		}
		log.Info("pinned maps", "dir", o.PinDir, "frontends", len(b.programmed), "backends", len(b.backendIDs))
	}
	if o.Deferred {
		return b, nil
	}
	if _, err := b.Apply(cfg); err != nil {
		dp.Close()
		return nil, err
	}
	return b, nil
}

// adopt takes what the (pinned) maps program as the current state.
func (b *Balancer) adopt() error {
	fes, bes, err := b.dp.Programmed()
	if err != nil {
		return err
	}
	for fe, e := range fes {
		b.programmed[fe] = frontendState{id: e.ID, flags: e.Flags, affinity: e.AffinitySec, snatAddr: e.SNATAddr, slots: e.Slots, ranges: e.SourceRanges}
		b.nextSvc = max(b.nextSvc, e.ID)
	}
	for id, ap := range bes {
		b.nextBackend = max(b.nextBackend, id)
		if prev, ok := b.backendIDs[ap]; ok {
			// Two ids for one address: keep one; a slot that points at
			// the other differs from the desired slots and is rewritten.
			if err := b.dp.DeleteBackend(max(id, prev)); err != nil {
				return err
			}
			id = min(id, prev)
		}
		b.backendIDs[ap] = id
	}
	return nil
}

// Datapath exposes the loaded program and maps (tests, stats).
func (b *Balancer) Datapath() *bpf.Datapath { return b.dp }

type want struct {
	snat     bool
	snatAddr netip.Addr // with snat; invalid: the frontend's own address
	maglev   bool
	affinity uint32           // seconds; 0: none
	ready    []netip.AddrPort // receive new connections, sorted
	// restricted: only clients inside ranges open connections (a
	// load-balancer IP of a Service with loadBalancerSourceRanges).
	restricted bool
	ranges     []netip.Prefix
}

// desired expands services into frontends, and lists every endpoint that
// must stay in the backends map (terminating ones keep their connections).
//
// Per port, new connections go to the ready endpoints (cluster-wide), or
// with a Local traffic policy to this node's ready endpoints; either set
// falls back to its terminating endpoints when none is ready (as
// kube-proxy does); an empty set drops new connections. External traffic
// (NodePorts, external and load-balancer IPs) with externalTrafficPolicy
// Cluster is SNATed to a node address; Local keeps the client's address,
// which is safe because the backend is here. Load-balancer IPs of a
// Service with source ranges take new connections from those only.
func desired(c *services.Config) (map[bpf.Frontend]want, map[netip.AddrPort]bool) {
	fes := map[bpf.Frontend]want{}
	keep := map[netip.AddrPort]bool{}
	sorted := func(aps []netip.AddrPort) []netip.AddrPort {
		slices.SortFunc(aps, func(a, b netip.AddrPort) int { return a.Compare(b) })
		return slices.Compact(aps)
	}
	for _, s := range c.Services {
		var affinity uint32
		if s.SessionAffinity == services.AffinityClientIP {
			affinity = uint32(s.SessionAffinityTimeout / time.Second)
		}
		maglev := s.Selection == services.SelectionMaglev
		for _, p := range s.Ports {
			proto := bpf.TCP
			if p.Protocol == "UDP" {
				proto = bpf.UDP
			}
			for _, e := range s.Endpoints {
				keep[netip.AddrPortFrom(e.Address, p.TargetPort)] = true
			}
			// Each family's frontends get that family's endpoints.
			for _, v4 := range []bool{true, false} {
				var ready, term, local, localTerm []netip.AddrPort
				for _, e := range s.Endpoints {
					if e.Address.Is4() != v4 {
						continue
					}
					ap := netip.AddrPortFrom(e.Address, p.TargetPort)
					if e.Terminating {
						term = append(term, ap)
					} else {
						ready = append(ready, ap)
					}
					if c.Local(e) {
						if e.Terminating {
							localTerm = append(localTerm, ap)
						} else {
							local = append(local, ap)
						}
					}
				}
				if len(ready) == 0 {
					ready = term
				}
				if len(local) == 0 {
					local = localTerm
				}
				ready, local = sorted(ready), sorted(local)
				w := want{maglev: maglev, affinity: affinity, ready: ready}
				if s.InternalTrafficPolicy == services.PolicyLocal {
					w.ready = local
				}
				for _, a := range s.Addresses() {
					if a.Is4() == v4 {
						fes[bpf.Frontend{Addr: a, Port: p.Port, Proto: proto}] = w
					}
				}
				hasFamily := slices.ContainsFunc(s.Addresses(), func(a netip.Addr) bool { return a.Is4() == v4 })
				ext := want{maglev: maglev, affinity: affinity, ready: ready, snat: true}
				if s.ExternalTrafficPolicy == services.PolicyLocal {
					ext = want{maglev: maglev, affinity: affinity, ready: local}
				}
				if p.NodePort != 0 && hasFamily {
					for _, a := range c.NodeAddresses {
						if a.Is4() == v4 {
							fes[bpf.Frontend{Addr: a, Port: p.NodePort, Proto: proto}] = ext
						}
					}
				}
				if ext.snat {
					ext.snatAddr = c.NodeAddress(v4)
				}
				for _, a := range s.ExternalIPs {
					if a.Is4() == v4 {
						fes[bpf.Frontend{Addr: a, Port: p.Port, Proto: proto}] = ext
					}
				}
				for _, a := range s.LoadBalancerIPs {
					if a.Is4() == v4 {
						fes[bpf.Frontend{Addr: a, Port: p.Port, Proto: proto}] = guarded(c, s, a, ext)
					}
				}
			}
		}
	}
	return fes, keep
}

// guarded is w for load-balancer IP a of s: limited to s's source ranges
// of a's family if s has any. As kube-proxy does, a range that holds a node
// address admits a itself as a source too: a node that routes a locally
// reaches it from a.
func guarded(c *services.Config, s services.Service, a netip.Addr, w want) want {
	if len(s.LoadBalancerSourceRanges) == 0 {
		return w
	}
	w.restricted = true
	w.ranges = s.SourceRanges(a.Is4())
	for _, r := range w.ranges {
		if slices.ContainsFunc(c.NodeAddresses, r.Contains) {
			w.ranges = append(slices.Clip(w.ranges), netip.PrefixFrom(a, a.BitLen()))
			break
		}
	}
	return w
}

// Apply programs cfg's services. Only frontends whose backend list changed
// are rewritten; node settings in cfg are ignored (see New).
func (b *Balancer) Apply(cfg *services.Config) (Changes, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ch Changes
	fes, keep := desired(cfg)
	if !b.ipv6 {
		// The IPv6 maps were sized to nothing at load; refuse before
		// writing anything rather than fail half way.
		for fe := range fes {
			if !fe.Addr.Is4() {
				return ch, fmt.Errorf("frontend %v: IPv6 needs ipv6: true in the node settings, and node settings need a restart", fe)
			}
		}
	}

	for ap := range keep {
		if _, ok := b.backendIDs[ap]; ok {
			continue
		}
		b.nextBackend++
		if err := b.dp.PutBackend(b.nextBackend, ap); err != nil {
			return ch, err
		}
		b.backendIDs[ap] = b.nextBackend
		ch.BackendsPut++
	}
	for fe, w := range fes {
		flags, slots := b.slots(w)
		cur, ok := b.programmed[fe]
		next := frontendState{id: cur.id, flags: flags, affinity: w.affinity, snatAddr: w.snatAddr, slots: slots, ranges: w.ranges}
		if ok && cur.same(next) {
			continue
		}
		if !ok {
			b.nextSvc++
			next.id = b.nextSvc
		}
		if err := b.dp.PutService(fe, next.entry(), cur.entry()); err != nil {
			return ch, err
		}
		b.programmed[fe] = next
		ch.ServicesPut++
	}
	for fe, cur := range b.programmed {
		if _, ok := fes[fe]; ok {
			continue
		}
		if err := b.dp.DeleteService(fe, cur.entry()); err != nil {
			return ch, err
		}
		delete(b.programmed, fe)
		ch.ServicesDeleted++
	}
	// Backends go last, after no slot points at them any more.
	for ap, id := range b.backendIDs {
		if keep[ap] {
			continue
		}
		if err := b.dp.DeleteBackend(id); err != nil {
			return ch, err
		}
		delete(b.backendIDs, ap)
		ch.BackendsDeleted++
	}
	b.cfg = cfg
	b.resolveNeighbours()
	return ch, nil
}

// resolveNeighbours keeps a managed neighbour entry (the kernel resolves it
// and keeps it reachable, Linux >= 5.16) for the next hop of every backend,
// so a new connection's first packet finds the MAC in the FIB lookup and is
// redirected at once instead of waiting in bpf_redirect_neigh for ARP.
// Entries of backends that left are deleted. Best effort: the datapath
// resolves on its own when this fails. Called with b.mu held.
func (b *Balancer) resolveNeighbours() {
	if b.nl == nil {
		return // not attached yet; AttachInterfaces calls again
	}
	want := map[netip.Addr]bool{}
	for ap := range b.backendIDs {
		want[ap.Addr()] = true
	}
	for addr := range want {
		if _, ok := b.neighs[addr]; ok {
			continue
		}
		routes, err := b.nl.RouteGet(addr.AsSlice())
		if err != nil || len(routes) == 0 || routes[0].Type == unix.RTN_LOCAL {
			continue // unroutable or on this node: nothing to resolve
		}
		hop := addr
		if gw, ok := netip.AddrFromSlice(routes[0].Gw); ok && routes[0].Gw != nil {
			hop = gw.Unmap()
		}
		e := neighEntry{link: routes[0].LinkIndex, hop: hop}
		if err := b.nl.NeighSet(e.neigh()); err != nil {
			b.log.Debug("resolve backend neighbour ahead", "backend", addr, "next_hop", hop, "err", err)
			continue
		}
		b.neighs[addr] = e
	}
	for addr, e := range b.neighs {
		if want[addr] {
			continue
		}
		delete(b.neighs, addr)
		shared := false
		for _, o := range b.neighs {
			shared = shared || o == e
		}
		if !shared {
			b.nl.NeighDel(e.neigh())
		}
	}
}

func (e neighEntry) neigh() *netlink.Neigh {
	family := netlink.FAMILY_V4
	if e.hop.Is6() {
		family = netlink.FAMILY_V6
	}
	return &netlink.Neigh{
		LinkIndex: e.link, Family: family, IP: e.hop.AsSlice(),
		// Managed: kept resolved by the kernel; externally learned: not
		// garbage-collected as an unused entry.
		Flags: netlink.NTF_EXT_LEARNED, FlagsExt: netlink.NTF_EXT_MANAGED,
	}
}

// slots computes a frontend's flags and selection slots: one slot per ready
// backend for random selection, a Maglev table over their addresses (not
// their node-local ids, so every node builds the same table) otherwise.
func (b *Balancer) slots(w want) (bpf.ServiceFlags, []uint32) {
	var flags bpf.ServiceFlags
	if w.snat {
		flags |= bpf.FlagSNAT
	}
	if w.restricted {
		flags |= bpf.FlagSourceRanges
	}
	if !w.maglev {
		ids := make([]uint32, len(w.ready))
		for i, ap := range w.ready {
			ids[i] = b.backendIDs[ap]
		}
		return flags, ids
	}
	flags |= bpf.FlagMaglev
	names := make([]string, len(w.ready))
	for i, ap := range w.ready {
		names[i] = ap.String()
	}
	table := maglevTable(names, MaglevTableSize)
	ids := make([]uint32, len(table))
	for i, be := range table {
		ids[i] = b.backendIDs[w.ready[be]]
	}
	return flags, ids
}

// AttachInterfaces attaches to every link in the calling thread's network
// namespace whose name matches one of the patterns and is not attached yet,
// and forgets links that disappeared. It returns how many are attached.
func (b *Balancer) AttachInterfaces() (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	links, err := netlink.LinkList()
	if err != nil {
		return len(b.links), fmt.Errorf("list interfaces: %w", err)
	}
	first := b.nl == nil
	if first {
		// Sockets opened here stay in this thread's namespace; opening
		// them elsewhere (NewHandleAt) would need setns and CAP_SYS_ADMIN.
		if b.nl, err = netlink.NewHandle(); err != nil {
			return 0, fmt.Errorf("netlink: %w", err)
		}
		defer b.resolveNeighbours()
	}
	seen := map[int]bool{}
	for _, l := range links {
		a := l.Attrs()
		seen[a.Index] = true
		if _, ok := b.links[a.Index]; ok || !matchAny(b.cfg.Interfaces, a.Name) {
			continue
		}
		pin := ""
		if b.pinDir != "" {
			pin = bpf.LinkPinPath(b.pinDir, a.Index)
		}
		c, err := bpf.AttachIngress(b.dp.Program(), a.Index, pin)
		if err != nil {
			return len(b.links), fmt.Errorf("interface %s: %w", a.Name, err)
		}
		b.links[a.Index] = c
		// A veth whose peer is in another namespace (a pod) can take
		// packets straight into that namespace, unless excluded.
		peer := false
		if v, ok := l.(*netlink.Veth); ok && v.Attrs().NetNsID >= 0 {
			peer = !matchAny(b.cfg.PeerRedirectExclude, a.Name)
		}
		if err := b.dp.SetPeerInterface(a.Index, peer); err != nil {
			return len(b.links), err
		}
		b.log.Info("attached", "interface", a.Name, "peer_redirect", peer)
	}
	if first && b.pinDir != "" {
		keep := map[int]bool{}
		for idx := range b.links {
			keep[idx] = true
		}
		if err := bpf.RemoveStaleLinks(b.pinDir, keep); err != nil {
			b.log.Warn("detach interfaces no longer configured", "err", err)
		}
	}
	for idx, c := range b.links {
		if !seen[idx] {
			c.Remove() // the link is gone; this drops our reference and pin
			b.dp.SetPeerInterface(idx, false)
			delete(b.links, idx)
		}
	}
	return len(b.links), nil
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// Sweep expires idle sessions once and records the live count.
func (b *Balancer) Sweep() error {
	b.mu.Lock()
	t := bpf.Timeouts{TCP: b.cfg.Sessions.TCPIdle, UDP: b.cfg.Sessions.UDPIdle, Closing: b.cfg.Sessions.ClosingIdle}
	b.mu.Unlock()
	live, removed, err := b.dp.Sweep(bpf.Monotonic(), t)
	b.mu.Lock()
	b.live = live
	b.mu.Unlock()
	if removed > 0 {
		b.log.Debug("expired sessions", "entries", removed, "live", live)
	}
	return err
}

// LiveSessions is the connection count at the last Sweep.
func (b *Balancer) LiveSessions() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.live
}

// Attached is the number of interfaces the program is attached to.
func (b *Balancer) Attached() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.links)
}

// Stats reads the datapath counters.
func (b *Balancer) Stats() (bpf.Stats, error) { return b.dp.Stats() }

// PinnedMapsCurrent unpins maps another build left under PinDir (other
// layouts); call it once every attached interface runs this program.
func (b *Balancer) PinnedMapsCurrent() error {
	dirs, _ := b.dp.PinnedMaps()
	if len(dirs) == 0 {
		return nil
	}
	return bpf.RemoveStaleMaps(b.pinDir, dirs)
}

// Close releases the program and maps: without a PinDir that detaches from
// every interface and frees the maps; with one, the program stays attached
// and keeps serving with the pinned maps until the next Open takes over
// (or bpf.Cleanup removes it).
func (b *Balancer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for idx, c := range b.links {
		c.Close()
		delete(b.links, idx)
	}
	if b.nl != nil {
		if b.pinDir == "" {
			// The program is gone; its neighbour entries go too. Pinned,
			// it keeps serving and they stay useful.
			for addr, e := range b.neighs {
				b.nl.NeighDel(e.neigh())
				delete(b.neighs, addr)
			}
		}
		b.nl.Close()
	}
	return b.dp.Close()
}

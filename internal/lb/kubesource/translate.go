// SPDX-License-Identifier: Apache-2.0

// Package kubesource is the load balancer's Kubernetes source: it watches
// Services and EndpointSlices with shared informers and turns them into the
// same services.Config the static YAML source produces, so the balancer, its
// incremental apply and the datapath are shared by both.
//
// The translation (Translate, and per Service in the Source) follows what
// kube-proxy does with the same objects:
//
//   - ClusterIP, NodePort and LoadBalancer Services are served on their IPv4
//     cluster IP and, for the latter two, on their NodePorts; headless and
//     ExternalName Services have nothing to translate.
//   - EndpointSlices join their Service through the kubernetes.io/service-name
//     label; a Service port takes the endpoints of every IPv4 slice that
//     carries a port of the same name and protocol, at that slice's port
//     number (a named targetPort can resolve differently per pod).
//   - Ready endpoints take new connections. Serving endpoints that are
//     terminating keep their existing connections but get no new ones
//     (services.Endpoint.Terminating: they stay in the backends map and out
//     of the selection slots), unless no endpoint of the port is ready: then,
//     as kube-proxy does, they take new connections too rather than none.
//     Anything else (not ready and not serving) is no backend.
//
// What the datapath cannot do (IPv6, SCTP, session affinity, Local traffic
// policies, external and load-balancer IPs) is reported as a Note instead of
// being served half right silently.
package kubesource

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// SelectionAnnotation on a Service chooses how new connections pick a
// backend (services.Service.Selection): "maglev" or "random" (the default).
const SelectionAnnotation = "swiftlane.io/lb-selection"

// Note says why (part of) a Service is not served, or is served differently
// from what it asks for.
type Note struct {
	Service string // namespace/name
	Level   slog.Level
	Reason  string
}

func (n Note) String() string { return n.Service + ": " + n.Reason }

// Translate builds the Config for a whole set of Services and EndpointSlices:
// node settings are copied from node (its Services are ignored), and each
// slice is joined to its Service by the kubernetes.io/service-name label.
// The Services come out sorted by name, so equal inputs give equal Configs.
func Translate(node *services.Config, svcs []*corev1.Service, eps []*discoveryv1.EndpointSlice) (*services.Config, []Note) {
	bySvc := map[string][]*discoveryv1.EndpointSlice{}
	for _, s := range eps {
		if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
			k := s.Namespace + "/" + name
			bySvc[k] = append(bySvc[k], s)
		}
	}
	per := map[string][]services.Service{}
	var notes []Note
	for _, svc := range svcs {
		k := svc.Namespace + "/" + svc.Name
		out, n := translateService(node, svc, bySvc[k])
		per[k] = out
		notes = append(notes, n...)
	}
	return assemble(node, per), notes
}

// assemble puts node settings and the translated Services together.
func assemble(node *services.Config, per map[string][]services.Service) *services.Config {
	c := *node
	c.Services = nil
	keys := make([]string, 0, len(per))
	for k := range per {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		c.Services = append(c.Services, per[k]...)
	}
	return &c
}

// candidate is one endpoint at one port number.
type candidate struct {
	ap                 netip.AddrPort
	ready, terminating bool
	servingTerminating bool
}

// translateService turns one Service and its slices into services.Services:
// one per group of ports that share the same endpoints (in practice one per
// Service), named namespace/name, or namespace/name:port,... when the ports
// must be split.
func translateService(node *services.Config, svc *corev1.Service, eps []*discoveryv1.EndpointSlice) ([]services.Service, []Note) {
	key := svc.Namespace + "/" + svc.Name
	var notes []Note
	note := func(level slog.Level, format string, a ...any) {
		notes = append(notes, Note{Service: key, Level: level, Reason: fmt.Sprintf(format, a...)})
	}

	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		note(slog.LevelDebug, "not served: type ExternalName is a DNS alias, there is no address to balance")
		return nil, notes
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		note(slog.LevelDebug, "not served: headless (clusterIP: None), clients reach the pods directly")
		return nil, notes
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var vip netip.Addr
	var v6 []string
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil:
			note(slog.LevelWarn, "cluster IP %q is not an IP address; ignored", s)
		case a.Is4() && !vip.IsValid():
			vip = a
		case !a.Is4():
			v6 = append(v6, s)
		}
	}
	if !vip.IsValid() {
		if len(v6) > 0 {
			note(slog.LevelWarn, "not served: no IPv4 cluster IP (%s); the load balancer is IPv4 only", strings.Join(v6, ", "))
		} else {
			note(slog.LevelDebug, "not served: no cluster IP allocated yet")
		}
		return nil, notes
	}
	if len(v6) > 0 {
		note(slog.LevelInfo, "IPv6 cluster IP %s not served (IPv4 only); %v is", strings.Join(v6, ", "), vip)
	}

	nodePorts := svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		note(slog.LevelWarn, "sessionAffinity ClientIP is not implemented: connections are balanced at random")
	}
	if nodePorts && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		note(slog.LevelWarn, "externalTrafficPolicy Local is not implemented: NodePorts use every endpoint and SNAT as with Cluster")
	}
	if p := svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
		note(slog.LevelWarn, "internalTrafficPolicy Local is not implemented: the cluster IP uses every endpoint")
	}
	if len(svc.Spec.ExternalIPs) > 0 {
		note(slog.LevelWarn, "externalIPs %s are not served (only the cluster IP and NodePorts)", strings.Join(svc.Spec.ExternalIPs, ", "))
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && len(svc.Status.LoadBalancer.Ingress) > 0 {
		note(slog.LevelInfo, "load-balancer ingress addresses are not served (only the cluster IP and NodePorts)")
	}

	// Endpoints per Service port, keyed by (port name, protocol) as the
	// EndpointSlice controller names slice ports after Service ports.
	type portKey struct {
		name  string
		proto corev1.Protocol
	}
	cands := map[portKey]map[netip.AddrPort]candidate{}
	var fqdn bool
	for _, s := range eps {
		switch s.AddressType {
		case discoveryv1.AddressTypeIPv4:
		case discoveryv1.AddressTypeFQDN:
			fqdn = true
			continue
		default: // IPv6: the Service's IPv6 side, already noted
			continue
		}
		for _, sp := range s.Ports {
			if sp.Port == nil || *sp.Port < 1 || *sp.Port > 65535 {
				continue // "all ports" slices have nothing a port-based frontend can use
			}
			pk := portKey{ptrOr(sp.Name, ""), ptrOr(sp.Protocol, corev1.ProtocolTCP)}
			m := cands[pk]
			if m == nil {
				m = map[netip.AddrPort]candidate{}
				cands[pk] = m
			}
			for _, e := range s.Endpoints {
				if len(e.Addresses) == 0 {
					continue
				}
				// Consumers use the first address only (API contract).
				a, err := netip.ParseAddr(e.Addresses[0])
				if err != nil || !a.Is4() {
					continue
				}
				ready := ptrOr(e.Conditions.Ready, true)
				c := candidate{
					ap:          netip.AddrPortFrom(a, uint16(*sp.Port)),
					ready:       ready,
					terminating: ptrOr(e.Conditions.Terminating, false),
				}
				// serving unset means "same as ready" (API contract).
				c.servingTerminating = ptrOr(e.Conditions.Serving, ready) && c.terminating
				// An endpoint can sit in two slices while it moves, or two
				// pods share an IP while one terminates: prefer the one
				// that is not terminating.
				if prev, ok := m[c.ap]; !ok || (prev.terminating && !c.terminating) {
					m[c.ap] = c
				}
			}
		}
	}
	if fqdn {
		note(slog.LevelWarn, "FQDN EndpointSlices are not served (IPv4 endpoints only)")
	}

	type group struct {
		ports []services.Port
		names []string
		eps   []services.Endpoint
	}
	var groups []*group
	bySig := map[string]*group{}
	for _, sp := range svc.Spec.Ports {
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		pname := sp.Name
		if pname == "" {
			pname = strconv.Itoa(int(sp.Port))
		}
		if proto != corev1.ProtocolTCP && proto != corev1.ProtocolUDP {
			note(slog.LevelWarn, "port %s: protocol %s is not supported (TCP and UDP only); not served", pname, proto)
			continue
		}
		p := services.Port{Name: sp.Name, Protocol: string(proto), Port: uint16(sp.Port)}
		if nodePorts && sp.NodePort != 0 {
			np := uint16(sp.NodePort)
			switch {
			case len(node.NodeAddresses) == 0:
				note(slog.LevelWarn, "port %s: nodePort %d not served: no node addresses (run with --node or set nodeAddresses)", pname, np)
			case np < node.NodePortRange.Min || np > node.NodePortRange.Max:
				note(slog.LevelWarn, "port %s: nodePort %d not served: outside nodePortRange %d-%d (set nodePortRange to the apiserver's --service-node-port-range)",
					pname, np, node.NodePortRange.Min, node.NodePortRange.Max)
			default:
				p.NodePort = np
			}
		}

		eps, target, dropped := selectEndpoints(cands[portKey{sp.Name, proto}])
		if len(dropped) > 0 {
			note(slog.LevelWarn, "port %s: endpoints resolve it to different target ports (%s); serving %d only, as the load balancer holds one target port per Service port",
				pname, strings.Join(dropped, ", "), target)
		}
		if target == 0 {
			// No endpoints: the number only matters once some appear.
			target = uint16(sp.TargetPort.IntValue())
			if sp.TargetPort.IntValue() < 1 || sp.TargetPort.IntValue() > 65535 {
				target = p.Port
			}
		}
		p.TargetPort = target

		var sig strings.Builder
		for _, e := range eps {
			fmt.Fprintf(&sig, "%v/%t;", e.Address, e.Terminating)
		}
		g := bySig[sig.String()]
		if g == nil {
			g = &group{eps: eps}
			bySig[sig.String()] = g
			groups = append(groups, g)
		}
		g.ports = append(g.ports, p)
		g.names = append(g.names, pname)
	}

	selection := services.SelectionRandom
	switch v := svc.Annotations[SelectionAnnotation]; v {
	case "", services.SelectionRandom:
	case services.SelectionMaglev:
		selection = v
	default:
		note(slog.LevelWarn, "annotation %s=%q: use %s or %s; selecting at random", SelectionAnnotation, v,
			services.SelectionRandom, services.SelectionMaglev)
	}
	out := make([]services.Service, 0, len(groups))
	for _, g := range groups {
		name := key
		if len(groups) > 1 {
			name = key + ":" + strings.Join(g.names, ",")
		}
		out = append(out, services.Service{Name: name, ClusterIP: vip, Selection: selection, Ports: g.ports, Endpoints: g.eps})
	}
	return out, notes
}

// selectEndpoints picks the endpoints of one Service port and the target
// port they use. Ready endpoints take new connections and serving
// terminating ones drain; with no ready endpoint the serving terminating
// ones take new connections (kube-proxy's fallback). A services.Port has a
// single target port, so when endpoints disagree the number with the most
// ready (then most) endpoints wins; the others are reported in dropped.
func selectEndpoints(m map[netip.AddrPort]candidate) (eps []services.Endpoint, target uint16, dropped []string) {
	anyReady := false
	for _, c := range m {
		anyReady = anyReady || c.ready
	}
	type tally struct{ ready, all int }
	byPort := map[uint16]*tally{}
	var usable []candidate
	for _, c := range m {
		if !c.ready && !c.servingTerminating {
			continue
		}
		usable = append(usable, c)
		t := byPort[c.ap.Port()]
		if t == nil {
			t = &tally{}
			byPort[c.ap.Port()] = t
		}
		t.all++
		if c.ready {
			t.ready++
		}
	}
	ports := make([]uint16, 0, len(byPort))
	for p := range byPort {
		ports = append(ports, p)
	}
	slices.SortFunc(ports, func(a, b uint16) int {
		ta, tb := byPort[a], byPort[b]
		return cmp.Or(cmp.Compare(tb.ready, ta.ready), cmp.Compare(tb.all, ta.all), cmp.Compare(a, b))
	})
	if len(ports) == 0 {
		return nil, 0, nil
	}
	target = ports[0]
	for _, p := range ports {
		dropped = append(dropped, fmt.Sprintf("%d: %d endpoints", p, byPort[p].all))
	}
	if len(ports) == 1 {
		dropped = nil
	}
	for _, c := range usable {
		if c.ap.Port() != target {
			continue
		}
		eps = append(eps, services.Endpoint{Address: c.ap.Addr(), Terminating: anyReady && !c.ready})
	}
	slices.SortFunc(eps, func(a, b services.Endpoint) int { return a.Address.Compare(b.Address) })
	return eps, target, dropped
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

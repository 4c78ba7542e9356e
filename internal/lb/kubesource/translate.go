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
//     cluster IP (and IPv6 one with ipv6: true in the node settings) and, for
//     the latter two, on their NodePorts; headless and ExternalName Services
//     have nothing to translate.
//
//   - EndpointSlices join their Service through the kubernetes.io/service-name
//     label; a Service port takes the endpoints of every IPv4 slice that
//     carries a port of the same name and protocol, at that slice's port
//     number (a named targetPort can resolve differently per pod).
//
//   - Ready endpoints take new connections. Serving endpoints that are
//     terminating keep their existing connections but get no new ones
//     (services.Endpoint.Terminating: they stay in the backends map and out
//     of the selection slots), unless no endpoint of the port is ready: then,
//     as kube-proxy does, the balancer gives them new connections too rather
//     than none. They stay marked terminating, so a health check node port
//     does not count them. Anything else (not ready and not serving) is no
//     backend.
//
//   - sessionAffinity ClientIP (with its timeout), the Local traffic
//     policies (endpoints whose nodeName is this node's, Config.NodeName),
//     externalIPs and load-balancer ingress IPs (except ipMode Proxy) are
//     served as kube-proxy serves them; so are a LoadBalancer Service's
//     loadBalancerSourceRanges (on its ingress IPs only) and, with
//     externalTrafficPolicy Local, its healthCheckNodePort.
//
// What the datapath cannot do (SCTP; IPv6 when off) is reported as a Note
// instead of being served half right silently.
package kubesource

import (
	"cmp"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

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
	cfg, conflicts := assemble(node, per)
	return cfg, append(notes, conflicts...)
}

// assemble puts node settings and the translated Services together. The
// apiserver keeps cluster IPs and NodePorts unique, but not external IPs: an
// external IP whose address and port another Service (or a NodePort on that
// address) already uses is dropped from the later Service, in name order,
// and reported.
func assemble(node *services.Config, per map[string][]services.Service) (*services.Config, []Note) {
	c := *node
	c.Services = nil
	keys := slices.Sorted(maps.Keys(per))
	type fe struct {
		addr  netip.Addr
		port  uint16
		proto string
	}
	used := map[fe]string{}
	for _, k := range keys {
		for _, s := range per[k] {
			for _, p := range s.Ports {
				used[fe{s.ClusterIP, p.Port, p.Protocol}] = s.Name
				if p.NodePort != 0 {
					for _, a := range node.NodeAddresses {
						used[fe{a, p.NodePort, p.Protocol}] = s.Name
					}
				}
			}
		}
	}
	var notes []Note
	for _, k := range keys {
		for _, s := range per[k] {
			// The IPs of s that no earlier Service (or port) holds.
			free := func(what string, ips []netip.Addr) []netip.Addr {
				var out []netip.Addr
				for _, a := range ips {
					clash := ""
					for _, p := range s.Ports {
						if owner, ok := used[fe{a, p.Port, p.Protocol}]; ok {
							clash = fmt.Sprintf("%v:%d/%s is already %s's", a, p.Port, p.Protocol, owner)
							break
						}
					}
					if clash != "" {
						notes = append(notes, Note{Service: k, Level: slog.LevelWarn, Reason: what + " " + a.String() + " not served: " + clash})
						continue
					}
					for _, p := range s.Ports {
						used[fe{a, p.Port, p.Protocol}] = s.Name
					}
					out = append(out, a)
				}
				return out
			}
			s.ExternalIPs = free("external IP", s.ExternalIPs)
			s.LoadBalancerIPs = free("load-balancer ingress IP", s.LoadBalancerIPs)
			c.Services = append(c.Services, s)
		}
	}
	return &c, notes
}

// candidate is one endpoint at one port number.
type candidate struct {
	ap                 netip.AddrPort
	ready, terminating bool
	servingTerminating bool
	nodeName           string
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
	// The primary family first, one address per family; IPv6 only when the
	// node settings enable it.
	var vips []netip.Addr
	var v6 []string
	for _, s := range ips {
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil:
			note(slog.LevelWarn, "cluster IP %q is not an IP address; ignored", s)
		case !a.Is4() && !node.IPv6:
			v6 = append(v6, s)
		case !slices.ContainsFunc(vips, func(v netip.Addr) bool { return v.Is4() == a.Is4() }):
			vips = append(vips, a)
		}
	}
	if len(vips) == 0 {
		if len(v6) > 0 {
			note(slog.LevelWarn, "not served: no IPv4 cluster IP (%s) and IPv6 is off (set ipv6: true in the node settings)", strings.Join(v6, ", "))
		} else {
			note(slog.LevelDebug, "not served: no cluster IP allocated yet")
		}
		return nil, notes
	}
	if len(v6) > 0 {
		note(slog.LevelInfo, "IPv6 cluster IP %s not served (IPv6 is off: set ipv6: true in the node settings); %v is", strings.Join(v6, ", "), vips[0])
	}
	vip := vips[0]

	nodePorts := svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
	out := services.Service{Name: key, ClusterIP: vip, SessionAffinity: services.AffinityNone,
		ExternalTrafficPolicy: services.PolicyCluster, InternalTrafficPolicy: services.PolicyCluster}
	if len(vips) > 1 {
		out.ClusterIPs = vips
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		out.SessionAffinity = services.AffinityClientIP
		out.SessionAffinityTimeout = services.DefaultAffinityTimeout
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			sec := *c.ClientIP.TimeoutSeconds
			if d := time.Duration(sec) * time.Second; sec >= 1 && d <= services.MaxAffinityTimeout {
				out.SessionAffinityTimeout = d
			} else {
				note(slog.LevelWarn, "sessionAffinityConfig.clientIP.timeoutSeconds %d: outside 1-86400; using %v", sec, services.DefaultAffinityTimeout)
			}
		}
	}
	local := func(field string) string {
		if node.NodeName == "" {
			note(slog.LevelWarn, "%s Local served as Cluster: this node's name is unknown (run with --node)", field)
			return services.PolicyCluster
		}
		return services.PolicyLocal
	}
	if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal {
		out.ExternalTrafficPolicy = local("externalTrafficPolicy")
	}
	if p := svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
		out.InternalTrafficPolicy = local("internalTrafficPolicy")
	}
	addExternal := func(to *[]netip.Addr, what, s string) {
		a, err := netip.ParseAddr(s)
		switch {
		case err != nil:
			note(slog.LevelWarn, "%s %q is not an IP address; ignored", what, s)
		case !a.Is4() && !node.IPv6:
			note(slog.LevelInfo, "%s %s not served (IPv6 is off: set ipv6: true in the node settings)", what, s)
		case !slices.Contains(*to, a):
			*to = append(*to, a)
		}
	}
	for _, s := range svc.Spec.ExternalIPs {
		addExternal(&out.ExternalIPs, "externalIP", s)
	}
	isExternal := func(s string) bool {
		a, err := netip.ParseAddr(s)
		return err == nil && slices.Contains(out.ExternalIPs, a)
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			switch {
			case in.IP == "":
				note(slog.LevelInfo, "load-balancer ingress %q has no IP; nothing to serve", in.Hostname)
			case in.IPMode != nil && *in.IPMode == corev1.LoadBalancerIPModeProxy:
				// The load balancer proxies to the NodePorts itself; traffic
				// to the IP must not be captured on the node (as kube-proxy).
				note(slog.LevelDebug, "load-balancer ingress %s has ipMode Proxy; served through the NodePorts only", in.IP)
			case isExternal(in.IP):
				// Also an externalIP, whose rule kube-proxy matches first:
				// served as that, without the source ranges.
				note(slog.LevelInfo, "load-balancer ingress IP %s is also an externalIP; served as one, open to every client", in.IP)
			default:
				addExternal(&out.LoadBalancerIPs, "load-balancer ingress IP", in.IP)
			}
		}
		out.LoadBalancerSourceRanges = sourceRanges(node, svc, note)
		if len(svc.Spec.LoadBalancerSourceRanges) > 0 && len(out.LoadBalancerSourceRanges) == 0 && len(out.LoadBalancerIPs) > 0 {
			// An empty list would open them to every client.
			note(slog.LevelError, "load-balancer ingress IPs %v not served: spec.loadBalancerSourceRanges has no usable range, and serving them without one would admit every client", out.LoadBalancerIPs)
			out.LoadBalancerIPs = nil
		}
		if svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal && svc.Spec.HealthCheckNodePort != 0 {
			switch hp := svc.Spec.HealthCheckNodePort; {
			case out.ExternalTrafficPolicy != services.PolicyLocal:
				note(slog.LevelWarn, "healthCheckNodePort %d not served: externalTrafficPolicy Local is served as Cluster", hp)
			case hp < 1 || hp > 65535:
				note(slog.LevelWarn, "healthCheckNodePort %d not served: not a port number", hp)
			default:
				out.HealthCheckNodePort = uint16(hp)
			}
		}
	}
	if out.ExternalTrafficPolicy == services.PolicyCluster {
		for _, l := range []struct {
			what string
			ips  *[]netip.Addr
		}{{"external IPs", &out.ExternalIPs}, {"load-balancer ingress IPs", &out.LoadBalancerIPs}} {
			var kept, dropped []netip.Addr
			for _, a := range *l.ips {
				if node.NodeAddress(a.Is4()).IsValid() {
					kept = append(kept, a)
				} else {
					dropped = append(dropped, a)
				}
			}
			if len(dropped) > 0 {
				note(slog.LevelWarn, "%s %v not served: no node address of their family to give their traffic as source (run with --node or set nodeAddresses)", l.what, dropped)
			}
			*l.ips = kept
		}
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
		case discoveryv1.AddressTypeIPv6:
			if !node.IPv6 {
				continue // the Service's IPv6 side, already noted
			}
		case discoveryv1.AddressTypeFQDN:
			fqdn = true
			continue
		default:
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
				if err != nil || (!a.Is4() && !node.IPv6) {
					continue
				}
				ready := ptrOr(e.Conditions.Ready, true)
				c := candidate{
					ap:          netip.AddrPortFrom(a, uint16(*sp.Port)),
					ready:       ready,
					terminating: ptrOr(e.Conditions.Terminating, false),
					nodeName:    ptrOr(e.NodeName, ""),
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
			fmt.Fprintf(&sig, "%v/%t/%s;", e.Address, e.Terminating, e.NodeName)
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
	out.Selection = selection
	res := make([]services.Service, 0, len(groups))
	for i, g := range groups {
		sv := out
		if len(groups) > 1 {
			sv.Name = key + ":" + strings.Join(g.names, ",")
		}
		if i > 0 {
			// One health check per Service: the first group answers it,
			// counting its own endpoints (the groups differ only in pods
			// that lack some named port).
			sv.HealthCheckNodePort = 0
		}
		sv.Ports, sv.Endpoints = g.ports, g.eps
		res = append(res, sv)
	}
	return res, notes
}

// sourceRanges parses a LoadBalancer Service's spec.loadBalancerSourceRanges
// (padded with blanks, which the apiserver lets through, as kube-proxy
// trims them). A range that does not parse is left out with an error note
// naming it; the others still apply. IPv6 ranges are left out silently
// when IPv6 is off: no IPv6 address of the Service is served then.
func sourceRanges(node *services.Config, svc *corev1.Service, note func(slog.Level, string, ...any)) []netip.Prefix {
	var out []netip.Prefix
	for i, r := range svc.Spec.LoadBalancerSourceRanges {
		p, err := netip.ParsePrefix(strings.TrimSpace(r))
		switch {
		case err != nil:
			note(slog.LevelError, "spec.loadBalancerSourceRanges[%d] %q is not a CIDR (e.g. 203.0.113.0/24); left out, the other ranges still apply", i, r)
		case !p.Addr().Is4() && !node.IPv6:
		case p.Addr().Is4In6():
			note(slog.LevelError, "spec.loadBalancerSourceRanges[%d] %q: an IPv4-mapped IPv6 range matches no client; write it as IPv4; left out", i, r)
		default:
			out = append(out, p.Masked())
		}
	}
	return out
}

// selectEndpoints picks the endpoints of one Service port and the target
// port they use: the ready ones and the serving terminating ones (which
// drain, or with no ready endpoint take new connections: the balancer's
// fallback, as kube-proxy's). A services.Port has a
// single target port, so when endpoints disagree the number with the most
// ready (then most) endpoints wins; the others are reported in dropped.
func selectEndpoints(m map[netip.AddrPort]candidate) (eps []services.Endpoint, target uint16, dropped []string) {
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
		eps = append(eps, services.Endpoint{Address: c.ap.Addr(), Terminating: !c.ready, NodeName: c.nodeName})
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

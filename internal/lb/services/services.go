// SPDX-License-Identifier: Apache-2.0

// Package services reads the load balancer's static YAML source: node
// settings plus a list of Services, each with ports and endpoints, shaped
// like their Kubernetes counterparts so a Kubernetes source can produce the
// same Config later.
package services

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path"
	"slices"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is one snapshot of everything the load balancer serves.
type Config struct {
	// NodeAddresses are the addresses NodePorts answer on (IPv4). The first
	// is also the source given to external-IP traffic (externalTrafficPolicy
	// Cluster), so the backend's reply comes back through this node.
	NodeAddresses []netip.Addr `yaml:"nodeAddresses"`
	// NodeName is this node's name: endpoints with the same nodeName are
	// local, for the Local traffic policies.
	NodeName string `yaml:"nodeName"`
	// IPv6 serves IPv6 (and dual-stack) Services too. Off, the IPv6 maps
	// take no memory and IPv6 addresses are refused.
	IPv6 bool `yaml:"ipv6"`
	// HairpinAddress6 is the IPv6 hairpin source (unset: an IPv6 backend
	// reaching its own service is dropped).
	HairpinAddress6 netip.Addr `yaml:"hairpinAddress6"`
	// HairpinAddress is the source given to a backend that reaches its own
	// service; it must not be used anywhere else on the node.
	HairpinAddress netip.Addr `yaml:"hairpinAddress"`
	SNATPorts      PortRange  `yaml:"snatPorts"`
	NodePortRange  PortRange  `yaml:"nodePortRange"`
	// Interfaces to attach to, as shell patterns ("eth0", "veth*").
	Interfaces []string `yaml:"interfaces"`
	// PeerRedirectExclude lists host-side veths (shell patterns) whose pod
	// gets translated packets through its receive backlog instead of
	// straight into its namespace (bpf_redirect_peer). The direct path is
	// cheaper but runs the pod's receive work on the CPU that translated the
	// packet, bypassing RPS set on the pod's interface.
	PeerRedirectExclude []string  `yaml:"peerRedirectExclude"`
	Sessions            Sessions  `yaml:"sessions"`
	Services            []Service `yaml:"services"`
}

type PortRange struct {
	Min uint16 `yaml:"min"`
	Max uint16 `yaml:"max"`
}

type Sessions struct {
	Max         uint32        `yaml:"max"`         // connections (two map entries each)
	TCPIdle     time.Duration `yaml:"tcpIdle"`     // idle established TCP
	UDPIdle     time.Duration `yaml:"udpIdle"`     // idle UDP
	ClosingIdle time.Duration `yaml:"closingIdle"` // after FIN/RST
}

type Service struct {
	Name      string     `yaml:"name"`
	ClusterIP netip.Addr `yaml:"clusterIP"`
	// ClusterIPs are a dual-stack Service's addresses, one per family, the
	// first equal to ClusterIP (which may then be left out).
	ClusterIPs []netip.Addr `yaml:"clusterIPs,omitempty"`
	// Selection is how new connections pick a backend: SelectionRandom
	// (default) or SelectionMaglev.
	Selection string `yaml:"selection"`
	// SessionAffinity ClientIP sends a client's new connections to the
	// backend its previous one went to, if that was less than
	// SessionAffinityTimeout ago (default 3h, at most 24h) and the backend
	// still takes new connections. None (default): no affinity.
	SessionAffinity        string        `yaml:"sessionAffinity"`
	SessionAffinityTimeout time.Duration `yaml:"sessionAffinityTimeout"`
	// ExternalTrafficPolicy applies to NodePorts and external IPs. Cluster
	// (default): every endpoint, the source rewritten to a node address.
	// Local: only this node's endpoints, the client's address kept; no
	// local endpoint means the traffic is dropped.
	ExternalTrafficPolicy string `yaml:"externalTrafficPolicy"`
	// InternalTrafficPolicy applies to the cluster IP: Cluster (default)
	// or Local (only this node's endpoints; none: dropped).
	InternalTrafficPolicy string `yaml:"internalTrafficPolicy"`
	// ExternalIPs answer on every port like the cluster IP but count as
	// external traffic (Kubernetes externalIPs and load-balancer ingress
	// IPs). The network must route them to this node.
	ExternalIPs []netip.Addr `yaml:"externalIPs"`
	// LoadBalancerIPs are served as ExternalIPs are (Kubernetes: a
	// LoadBalancer Service's ingress IPs), and are what
	// LoadBalancerSourceRanges guard.
	LoadBalancerIPs []netip.Addr `yaml:"loadBalancerIPs"`
	// LoadBalancerSourceRanges, when any are listed, admit new connections
	// to the LoadBalancerIPs only from clients inside one of them of the
	// IP's family; an IP whose family has none admits nobody. As with
	// kube-proxy, the cluster IP, NodePorts and external IPs stay open, and
	// if a range holds a node address, the LoadBalancerIPs themselves are
	// admitted as sources (a node reaching an IP it routes locally).
	LoadBalancerSourceRanges []netip.Prefix `yaml:"loadBalancerSourceRanges"`
	// HealthCheckNodePort, with externalTrafficPolicy Local, is the TCP
	// port on which this node answers a load balancer's health check over
	// HTTP: 200 while it has a ready local endpoint, 503 otherwise.
	HealthCheckNodePort uint16     `yaml:"healthCheckNodePort"`
	Ports               []Port     `yaml:"ports"`
	Endpoints           []Endpoint `yaml:"endpoints"`
}

// Values of Service.SessionAffinity and the traffic policies, spelled as
// in Kubernetes.
const (
	AffinityNone     = "None"
	AffinityClientIP = "ClientIP"
	PolicyCluster    = "Cluster"
	PolicyLocal      = "Local"
	// DefaultAffinityTimeout is Kubernetes' default (10800 s).
	DefaultAffinityTimeout = 3 * time.Hour
	// MaxAffinityTimeout is Kubernetes' limit (86400 s).
	MaxAffinityTimeout = 24 * time.Hour
)

const (
	// SelectionRandom picks a ready backend uniformly at random.
	SelectionRandom = "random"
	// SelectionMaglev picks by a consistent hash of the connection's
	// 5-tuple: the same backend on every LB node, and few connections move
	// to another backend when the set changes.
	SelectionMaglev = "maglev"
)

type Port struct {
	Name       string `yaml:"name"`
	Protocol   string `yaml:"protocol"` // TCP (default) or UDP
	Port       uint16 `yaml:"port"`
	TargetPort uint16 `yaml:"targetPort"` // default: Port
	NodePort   uint16 `yaml:"nodePort"`   // 0: ClusterIP only
}

type Endpoint struct {
	Address netip.Addr `yaml:"address"`
	// Terminating endpoints keep their existing connections but get no new ones.
	Terminating bool `yaml:"terminating"`
	// NodeName is the node the endpoint runs on (Config.NodeName: local).
	NodeName string `yaml:"nodeName"`
}

// Addresses are the service's cluster IPs: one, or one per family.
func (s Service) Addresses() []netip.Addr {
	if len(s.ClusterIPs) > 0 {
		return s.ClusterIPs
	}
	return []netip.Addr{s.ClusterIP}
}

// SourceRanges are the LoadBalancerSourceRanges of one family (IPv4 when
// v4), masked, sorted and without duplicates.
func (s Service) SourceRanges(v4 bool) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s.LoadBalancerSourceRanges {
		if p.Addr().Is4() == v4 {
			out = append(out, p.Masked())
		}
	}
	slices.SortFunc(out, comparePrefix)
	return slices.Compact(out)
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// LocalReadyEndpoints counts the distinct addresses of s's endpoints on
// this node that are not terminating: what a health check node port
// reports (kube-proxy counts them so; a node whose local endpoints are all
// terminating answers 503, so load balancers drain it).
func (c *Config) LocalReadyEndpoints(s Service) int {
	seen := map[netip.Addr]bool{}
	for _, e := range s.Endpoints {
		if c.Local(e) && !e.Terminating {
			seen[e.Address] = true
		}
	}
	return len(seen)
}

// NodeAddress is the first node address of the family (IPv4 when v4),
// the source external traffic of that family is given; invalid if none.
func (c *Config) NodeAddress(v4 bool) netip.Addr {
	for _, a := range c.NodeAddresses {
		if a.Is4() == v4 {
			return a
		}
	}
	return netip.Addr{}
}

// Local reports whether e runs on the node c describes.
func (c *Config) Local(e Endpoint) bool { return c.NodeName != "" && e.NodeName == c.NodeName }

// Defaults fills what the file left out.
func (c *Config) Defaults() {
	if !c.HairpinAddress.IsValid() {
		c.HairpinAddress = netip.MustParseAddr("169.254.42.1")
	}
	if c.SNATPorts == (PortRange{}) {
		c.SNATPorts = PortRange{32768, 60999}
	}
	if c.NodePortRange == (PortRange{}) {
		c.NodePortRange = PortRange{30000, 32767}
	}
	if c.Sessions.Max == 0 {
		c.Sessions.Max = 131072
	}
	if c.Sessions.TCPIdle == 0 {
		c.Sessions.TCPIdle = 2 * time.Hour
	}
	if c.Sessions.UDPIdle == 0 {
		c.Sessions.UDPIdle = time.Minute
	}
	if c.Sessions.ClosingIdle == 0 {
		c.Sessions.ClosingIdle = 10 * time.Second
	}
	for i := range c.Services {
		sv := &c.Services[i]
		if !sv.ClusterIP.IsValid() && len(sv.ClusterIPs) > 0 {
			sv.ClusterIP = sv.ClusterIPs[0]
		}
		if sv.Selection == "" {
			sv.Selection = SelectionRandom
		}
		if sv.SessionAffinity == "" {
			sv.SessionAffinity = AffinityNone
		}
		if sv.SessionAffinity == AffinityClientIP && sv.SessionAffinityTimeout == 0 {
			sv.SessionAffinityTimeout = DefaultAffinityTimeout
		}
		if sv.ExternalTrafficPolicy == "" {
			sv.ExternalTrafficPolicy = PolicyCluster
		}
		if sv.InternalTrafficPolicy == "" {
			sv.InternalTrafficPolicy = PolicyCluster
		}
		for j := range c.Services[i].Ports {
			p := &c.Services[i].Ports[j]
			if p.Protocol == "" {
				p.Protocol = "TCP"
			}
			if p.TargetPort == 0 {
				p.TargetPort = p.Port
			}
		}
	}
}

// Validate reports every problem, each naming the field and the fix.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	// family is "" for an address this configuration can serve, else why not.
	family := func(a netip.Addr) string {
		switch {
		case a.Is4():
			return ""
		case a.Is6() && !a.Is4In6() && c.IPv6:
			return ""
		case a.Is6() && !a.Is4In6():
			return "an IPv6 address needs ipv6: true"
		}
		return "not an IP address"
	}
	for i, a := range c.NodeAddresses {
		if why := family(a); why != "" {
			bad("nodeAddresses[%d] %v: %s", i, a, why)
		}
	}
	if a := c.HairpinAddress6; a.IsValid() && (!a.Is6() || a.Is4In6()) {
		bad("hairpinAddress6 %v: set an IPv6 address reserved for hairpin SNAT, e.g. fd00:5c:1::1", a)
	}
	if !c.HairpinAddress.Is4() {
		bad("hairpinAddress %v: set an IPv4 address reserved for hairpin SNAT, e.g. 169.254.42.1", c.HairpinAddress)
	}
	if c.SNATPorts.Min == 0 || c.SNATPorts.Min > c.SNATPorts.Max {
		bad("snatPorts %d-%d: min must be >0 and <= max", c.SNATPorts.Min, c.SNATPorts.Max)
	}
	if c.NodePortRange.Min > c.NodePortRange.Max {
		bad("nodePortRange %d-%d: min must be <= max", c.NodePortRange.Min, c.NodePortRange.Max)
	}
	if c.SNATPorts.Min <= c.NodePortRange.Max && c.NodePortRange.Min <= c.SNATPorts.Max {
		bad("snatPorts %d-%d overlaps nodePortRange %d-%d: SNAT must never hand out a NodePort; use e.g. 32768-60999",
			c.SNATPorts.Min, c.SNATPorts.Max, c.NodePortRange.Min, c.NodePortRange.Max)
	}
	if len(c.Interfaces) == 0 {
		bad("interfaces: list the interfaces to attach to, e.g. [eth0, \"veth*\"]")
	}
	for _, l := range []struct {
		key  string
		pats []string
	}{{"interfaces", c.Interfaces}, {"peerRedirectExclude", c.PeerRedirectExclude}} {
		for i, p := range l.pats {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				bad("%s[%d] %q: not a shell pattern; use a name or a glob such as \"veth*\"", l.key, i, p)
			}
		}
	}
	names := map[string]bool{}
	frontends := map[string]string{}
	claim := func(key, owner string) {
		if prev, ok := frontends[key]; ok {
			bad("%s: frontend %s is also used by %s; give each a distinct port", owner, key, prev)
		}
		frontends[key] = owner
	}
	for i, s := range c.Services {
		where := fmt.Sprintf("services[%d] (%s)", i, s.Name)
		if s.Name == "" {
			bad("services[%d].name: required", i)
		} else if names[s.Name] {
			bad("%s.name: duplicate service name", where)
		}
		names[s.Name] = true
		if why := family(s.ClusterIP); why != "" {
			bad("%s.clusterIP %v: set the service address (%s)", where, s.ClusterIP, why)
		}
		if len(s.ClusterIPs) > 0 {
			fams := map[bool]bool{}
			for j, a := range s.ClusterIPs {
				if why := family(a); why != "" {
					bad("%s.clusterIPs[%d] %v: %s", where, j, a, why)
				} else if fams[a.Is4()] {
					bad("%s.clusterIPs[%d] %v: at most one address per family", where, j, a)
				}
				fams[a.Is4()] = true
			}
			if s.ClusterIPs[0] != s.ClusterIP {
				bad("%s.clusterIPs: the first (%v) must be clusterIP (%v)", where, s.ClusterIPs[0], s.ClusterIP)
			}
		}
		if s.Selection != SelectionRandom && s.Selection != SelectionMaglev {
			bad("%s.selection %q: use %s or %s", where, s.Selection, SelectionRandom, SelectionMaglev)
		}
		switch s.SessionAffinity {
		case AffinityNone:
		case AffinityClientIP:
			if t := s.SessionAffinityTimeout; t < time.Second || t > MaxAffinityTimeout || t%time.Second != 0 {
				bad("%s.sessionAffinityTimeout %v: use whole seconds from 1s to %v", where, t, MaxAffinityTimeout)
			}
		default:
			bad("%s.sessionAffinity %q: use %s or %s", where, s.SessionAffinity, AffinityNone, AffinityClientIP)
		}
		for _, pol := range []struct{ field, v string }{
			{"externalTrafficPolicy", s.ExternalTrafficPolicy}, {"internalTrafficPolicy", s.InternalTrafficPolicy},
		} {
			switch pol.v {
			case PolicyCluster:
			case PolicyLocal:
				if c.NodeName == "" {
					bad("%s.%s Local: set nodeName (this node) and the endpoints' nodeName, so local endpoints can be told apart", where, pol.field)
				}
			default:
				bad("%s.%s %q: use %s or %s", where, pol.field, pol.v, PolicyCluster, PolicyLocal)
			}
		}
		for _, l := range []struct {
			field string
			ips   []netip.Addr
		}{{"externalIPs", s.ExternalIPs}, {"loadBalancerIPs", s.LoadBalancerIPs}} {
			for j, a := range l.ips {
				if why := family(a); why != "" {
					bad("%s.%s[%d] %v: %s", where, l.field, j, a, why)
				} else if s.ExternalTrafficPolicy == PolicyCluster && !c.NodeAddress(a.Is4()).IsValid() {
					bad("%s.%s[%d] %v: set a node address of its family in nodeAddresses; external traffic (externalTrafficPolicy Cluster) is given it as its source", where, l.field, j, a)
				}
			}
		}
		for j, p := range s.LoadBalancerSourceRanges {
			if why := family(p.Addr()); why != "" || !p.IsValid() {
				bad("%s.loadBalancerSourceRanges[%d] %v: set a CIDR such as 203.0.113.0/24 (%s)", where, j, p, why)
			}
		}
		if hp := s.HealthCheckNodePort; hp != 0 {
			if s.ExternalTrafficPolicy != PolicyLocal {
				bad("%s.healthCheckNodePort %d: only with externalTrafficPolicy Local (it tells a load balancer whether this node has a local endpoint); remove it or set the policy", where, hp)
			}
			claim(fmt.Sprintf("node:%d/TCP", hp), where+".healthCheckNodePort")
		}
		if len(s.Ports) == 0 {
			bad("%s.ports: list at least one port", where)
		}
		for j, p := range s.Ports {
			pw := fmt.Sprintf("%s.ports[%d]", where, j)
			if p.Protocol != "TCP" && p.Protocol != "UDP" {
				bad("%s.protocol %q: use TCP or UDP", pw, p.Protocol)
			}
			if p.Port == 0 {
				bad("%s.port: required (1-65535)", pw)
			}
			if p.NodePort != 0 {
				if p.NodePort < c.NodePortRange.Min || p.NodePort > c.NodePortRange.Max {
					bad("%s.nodePort %d: outside nodePortRange %d-%d", pw, p.NodePort, c.NodePortRange.Min, c.NodePortRange.Max)
				}
				if len(c.NodeAddresses) == 0 {
					bad("%s.nodePort: set nodeAddresses so the NodePort has an address to answer on", pw)
				}
				claim(fmt.Sprintf("node:%d/%s", p.NodePort, p.Protocol), pw)
			}
			for _, a := range s.Addresses() {
				claim(fmt.Sprintf("%v:%d/%s", a, p.Port, p.Protocol), pw)
			}
			for _, a := range slices.Concat(s.ExternalIPs, s.LoadBalancerIPs) {
				claim(fmt.Sprintf("%v:%d/%s", a, p.Port, p.Protocol), pw)
			}
		}
		for j, e := range s.Endpoints {
			if why := family(e.Address); why != "" {
				bad("%s.endpoints[%d].address %v: set the backend's address (%s)", where, j, e.Address, why)
			}
		}
	}
	return errors.Join(errs...)
}

// Parse decodes, defaults and validates a YAML document. Unknown fields are
// errors so typos do not silently become defaults.
func Parse(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("parse services YAML: %w", err)
	}
	c.Defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Load reads and parses the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

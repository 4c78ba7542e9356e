// SPDX-License-Identifier: Apache-2.0

package services

import (
	"strings"
	"testing"
)

const example = `
nodeAddresses: [198.18.0.1]
interfaces: [ext0, "veth*"]
services:
  - name: web
    clusterIP: 10.96.0.10
    ports:
      - {name: http, port: 80, targetPort: 8080, nodePort: 30080}
      - {name: dns, protocol: UDP, port: 53}
    endpoints:
      - address: 10.244.2.2
      - {address: 10.244.3.2, terminating: true}
`

func TestParseAppliesDefaults(t *testing.T) {
	c, err := Parse([]byte(example))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Services[0].Ports
	if p[0].Protocol != "TCP" || p[1].TargetPort != 53 || c.SNATPorts.Min != 32768 || c.HairpinAddress.String() != "169.254.42.1" {
		t.Fatalf("defaults not applied: %+v %+v", p, c)
	}
	if c.Services[0].Selection != SelectionRandom {
		t.Fatalf("selection %q, want the default %q", c.Services[0].Selection, SelectionRandom)
	}
	if s := c.Services[0]; s.SessionAffinity != AffinityNone || s.ExternalTrafficPolicy != PolicyCluster || s.InternalTrafficPolicy != PolicyCluster {
		t.Fatalf("affinity/policy defaults: %q %q %q", s.SessionAffinity, s.ExternalTrafficPolicy, s.InternalTrafficPolicy)
	}
	if !c.Services[0].Endpoints[1].Terminating {
		t.Fatal("terminating lost")
	}
}

func TestValidateNamesFieldAndFix(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"overlap":   {"snatPorts: {min: 30000, max: 40000}\n", "snatPorts 30000-40000 overlaps nodePortRange"},
		"typo":      {"nodeAdresses: [1.2.3.4]\n", "field nodeAdresses not found"},
		"protocol":  {"services: [{name: a, clusterIP: 10.0.0.1, ports: [{port: 1, protocol: SCTP}]}]\n", "services[0] (a).ports[0].protocol \"SCTP\": use TCP or UDP"},
		"selection": {"services: [{name: a, clusterIP: 10.0.0.1, selection: ring, ports: [{port: 1}]}]\n", "services[0] (a).selection \"ring\": use random or maglev"},
		"nodeport":  {"services: [{name: a, clusterIP: 10.0.0.1, ports: [{port: 1, nodePort: 80}]}]\n", "nodePort 80: outside nodePortRange"},
		"affinity":  {"services: [{name: a, clusterIP: 10.0.0.1, sessionAffinity: clientip, ports: [{port: 1}]}]\n", "services[0] (a).sessionAffinity \"clientip\": use None or ClientIP"},
		"timeout":   {"services: [{name: a, clusterIP: 10.0.0.1, sessionAffinity: ClientIP, sessionAffinityTimeout: 48h, ports: [{port: 1}]}]\n", "sessionAffinityTimeout 48h0m0s: use whole seconds from 1s to 24h0m0s"},
		"policy":    {"services: [{name: a, clusterIP: 10.0.0.1, externalTrafficPolicy: local, ports: [{port: 1}]}]\n", "externalTrafficPolicy \"local\": use Cluster or Local"},
		"nodename":  {"services: [{name: a, clusterIP: 10.0.0.1, internalTrafficPolicy: Local, ports: [{port: 1}]}]\n", "internalTrafficPolicy Local: set nodeName"},
		"extip":     {"services: [{name: a, clusterIP: 10.0.0.1, externalIPs: [203.0.113.1], ports: [{port: 1}]}]\n", "externalIPs[0] 203.0.113.1: set a node address of its family"},
		"extip6":    {"nodeAddresses: [1.1.1.1]\nservices: [{name: a, clusterIP: 10.0.0.1, externalIPs: [\"2001:db8::1\"], ports: [{port: 1}]}]\n", "externalIPs[0] 2001:db8::1: an IPv6 address needs ipv6: true"},
		"extipdup":  {"nodeAddresses: [1.1.1.1]\nservices: [{name: a, clusterIP: 10.0.0.1, externalIPs: [10.0.0.2], ports: [{port: 1}]}, {name: b, clusterIP: 10.0.0.2, ports: [{port: 1}]}]\n", "also used by"},
		"dualfam":   {"ipv6: true\nservices: [{name: a, clusterIPs: [10.0.0.1, 10.0.0.2], ports: [{port: 1}]}]\n", "clusterIPs[1] 10.0.0.2: at most one address per family"},
		"dualfirst": {"ipv6: true\nservices: [{name: a, clusterIP: \"fd00::1\", clusterIPs: [10.0.0.1, \"fd00::1\"], ports: [{port: 1}]}]\n", "clusterIPs: the first (10.0.0.1) must be clusterIP (fd00::1)"},
		"hairpin6":  {"hairpinAddress6: 10.0.0.9\n", "hairpinAddress6 10.0.0.9: set an IPv6 address"},
		"peerglob":  {"peerRedirectExclude: [\"vc[\"]\n", "peerRedirectExclude[0] \"vc[\": not a shell pattern"},
		"dup":       {"nodeAddresses: [1.1.1.1]\nservices: [{name: a, clusterIP: 10.0.0.1, ports: [{port: 1, nodePort: 30001}]}, {name: b, clusterIP: 10.0.0.2, ports: [{port: 1, nodePort: 30001}]}]\n", "also used by"},
	} {
		_, err := Parse([]byte("interfaces: [eth0]\n" + tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", name, err, tc.want)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/lb/labnet"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// The kube-proxy features beyond plain ClusterIP/NodePort: session
// affinity, Local traffic policies, external (and load-balancer) IPs.
// Backend 0 runs on this node ("node-a"), backends 1 and 2 on "node-b" (in
// this topology every backend is reachable; only the config says where it
// runs, which is what the policies act on).

const (
	stickyVIP  = "10.96.0.40"
	localVIP   = "10.96.0.41"
	localExtIP = "203.0.113.41"
	clusterVIP = "10.96.0.42"
	noLocalVIP = "10.96.0.44"
)

var clusterExtIPs = []string{"203.0.113.42", "203.0.113.43"}

func featuresConfig(affinityTimeout string, stickyEndpoints []int) func(*labnet.Topology) string {
	return func(topo *labnet.Topology) string {
		ep := func(i int, extra string) string {
			node := "node-b"
			if i == 0 {
				node = "node-a"
			}
			return fmt.Sprintf("{address: %s, nodeName: %s%s}", topo.BackendIPs[i], node, extra)
		}
		var all, sticky []string
		for i := range topo.BackendIPs {
			all = append(all, ep(i, ""))
			term := ", terminating: true"
			for _, j := range stickyEndpoints {
				if i == j {
					term = ""
				}
			}
			sticky = append(sticky, ep(i, term))
		}
		return fmt.Sprintf(`
nodeAddresses: [%[1]s]
nodeName: node-a
interfaces: [ext0, "v*"]
services:
  - name: sticky
    clusterIP: %[2]s
    sessionAffinity: ClientIP
    sessionAffinityTimeout: %[3]s
    ports: [{port: 80, targetPort: %[4]d, nodePort: 30040}]
    endpoints: [%[5]s]
  - name: local
    clusterIP: %[6]s
    externalTrafficPolicy: Local
    internalTrafficPolicy: Local
    externalIPs: [%[7]s]
    ports: [{port: 80, targetPort: %[4]d, nodePort: 30041}]
    endpoints: [%[8]s]
  - name: cluster
    clusterIP: %[9]s
    externalIPs: [%[10]s]
    ports: [{port: 80, targetPort: %[4]d}]
    endpoints: [%[8]s]
  - name: nolocal
    clusterIP: %[11]s
    externalTrafficPolicy: Local
    internalTrafficPolicy: Local
    ports: [{port: 80, targetPort: %[4]d, nodePort: 30044}]
    endpoints: [%[12]s]
`, topo.NodeIP, stickyVIP, affinityTimeout, port, strings.Join(sticky, ", "), localVIP, localExtIP,
			strings.Join(all, ", "), clusterVIP, strings.Join(clusterExtIPs, ", "), noLocalVIP, ep(1, ""))
	}
}

// tally makes n connections and counts backends and the peers they saw.
func (e *env) tally(from labnet.NS, addr string, n int) (backends, peers map[string]int) {
	e.t.Helper()
	backends, peers = map[string]int{}, map[string]int{}
	for range n {
		name, peer, err := ask(from, "tcp", addr)
		if err != nil {
			e.t.Fatalf("%s: %v", addr, err)
		}
		backends[name]++
		host, _, _ := strings.Cut(peer, ":")
		peers[host]++
	}
	return backends, peers
}

func only(m map[string]int) string {
	if len(m) != 1 {
		return ""
	}
	for k := range m {
		return k
	}
	return ""
}

func TestSessionAffinityClientIP(t *testing.T) {
	e := setupWith(t, featuresConfig("1h", []int{0, 1, 2}))
	nodePort := e.topo.NodeIP.String() + ":30040"
	first := map[string]string{}
	for _, c := range []struct {
		from labnet.NS
		addr string
	}{{e.topo.Client, stickyVIP + ":80"}, {e.topo.External, nodePort}} {
		got, _ := e.tally(c.from, c.addr, 30)
		if only(got) == "" {
			t.Fatalf("%s: 30 connections from one client reached %v, want one backend (ClientIP affinity)", c.addr, got)
		}
		first[c.addr] = only(got)
	}
	// The control: the same clients without affinity spread (3 backends).
	if got, _ := e.tally(e.topo.Client, clusterVIP+":80", 30); len(got) < 2 {
		t.Fatalf("without affinity 30 connections reached only %v; the check above would prove nothing", got)
	}
	e.noConntrack()

	// The remembered backend starts terminating: new connections leave it,
	// and stick to their new backend.
	gone := first[stickyVIP+":80"]
	var keep []int
	for i := range e.topo.BackendIPs {
		if fmt.Sprintf("b%d", i) != gone {
			keep = append(keep, i)
		}
	}
	e.apply(featuresConfig("1h", keep)(e.topo))
	got, _ := e.tally(e.topo.Client, stickyVIP+":80", 20)
	if only(got) == "" || only(got) == gone {
		t.Fatalf("after %s started terminating, 20 connections reached %v; want one other backend", gone, got)
	}

	// Expiry: with a 1 s timeout, a client idle for longer is balanced
	// afresh. Each round draws anew on two frontends (1 in 3 to repeat),
	// so five rounds with no change at all happen with p = 3^-8.
	e.apply(featuresConfig("1s", []int{0, 1, 2})(e.topo))
	seen := map[string]map[string]bool{}
	for round := range 5 {
		if round > 0 {
			time.Sleep(1100 * time.Millisecond) // the timeout under test must elapse
		}
		for _, c := range []struct {
			from labnet.NS
			addr string
		}{{e.topo.Client, stickyVIP + ":80"}, {e.topo.External, nodePort}} {
			name, _, err := ask(c.from, "tcp", c.addr)
			if err != nil {
				t.Fatal(err)
			}
			if seen[c.addr] == nil {
				seen[c.addr] = map[string]bool{}
			}
			seen[c.addr][name] = true
		}
	}
	if len(seen[stickyVIP+":80"]) == 1 && len(seen[nodePort]) == 1 {
		t.Fatalf("after idle periods longer than the 1 s timeout, clients kept their backends %v", seen)
	}
	st, _ := e.lb.Stats()
	if st.AffinityHits == 0 {
		t.Fatalf("affinity hits 0 after sticky connections")
	}
}

func (e *env) apply(cfg string) {
	e.t.Helper()
	c, err := services.Parse([]byte(cfg))
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.lb.Apply(c); err != nil {
		e.t.Fatal(err)
	}
}

func TestTrafficPolicyLocal(t *testing.T) {
	e := setupWith(t, featuresConfig("1h", []int{0, 1, 2}))
	client, external := e.topo.ClientIP.String(), e.topo.ExternalIP.String()
	for _, c := range []struct {
		what, addr, peer string
		from             labnet.NS
	}{
		// Local policies: only b0 (this node), and the client's own address.
		{"internalTrafficPolicy Local (cluster IP)", localVIP + ":80", client, e.topo.Client},
		{"externalTrafficPolicy Local (NodePort)", e.topo.NodeIP.String() + ":30041", external, e.topo.External},
		{"externalTrafficPolicy Local (external IP)", localExtIP + ":80", external, e.topo.External},
	} {
		got, peers := e.tally(c.from, c.addr, 20)
		if only(got) != "b0" || only(peers) != c.peer {
			t.Errorf("%s: reached %v seeing %v, want only b0 seeing %s", c.what, got, peers, c.peer)
		}
	}
	// No local endpoint: dropped, not sent to another node's.
	for _, c := range []struct {
		from labnet.NS
		addr string
	}{{e.topo.Client, noLocalVIP + ":80"}, {e.topo.External, e.topo.NodeIP.String() + ":30044"}} {
		before, _ := e.lb.Stats()
		if conn, err := c.from.Dial("tcp", c.addr, 300*time.Millisecond); err == nil {
			conn.Close()
			t.Errorf("%s: connected, but the Service has no endpoint on this node", c.addr)
		}
		if after, _ := e.lb.Stats(); after.Drops["no_backend"] == before.Drops["no_backend"] {
			t.Errorf("%s: no no_backend drop counted", c.addr)
		}
	}
	e.noConntrack()
}

func TestExternalIPs(t *testing.T) {
	e := setupWith(t, featuresConfig("1h", []int{0, 1, 2}))
	// Cluster policy: every endpoint, SNATed to the first node address so
	// the reply returns through this node; both addresses answer.
	for _, ip := range clusterExtIPs {
		got, peers := e.tally(e.topo.External, ip+":80", 30)
		if len(got) != backends || only(peers) != e.topo.NodeIP.String() {
			t.Errorf("external IP %s: reached %v seeing %v, want all %d backends seeing %s", ip, got, peers, backends, e.topo.NodeIP)
		}
	}
	e.noConntrack()
}

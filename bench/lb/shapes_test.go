// SPDX-License-Identifier: Apache-2.0

package main

import (
	"testing"

	"github.com/swiftlane/swiftlane/internal/lb/labnet"
)

// The comparison is only fair if every shape really serves the service:
// one request through each, ClusterIP and NodePort.
func TestShapesServe(t *testing.T) {
	labnet.RequireRoot(t)
	for name, apply := range map[string]func(*labnet.Topology) error{"iptables": applyIptables, "nftables": applyNft, "ipvs": applyIPVS} {
		t.Run(name, func(t *testing.T) {
			topo, err := labnet.New(2)
			if err != nil {
				t.Fatal(err)
			}
			defer topo.Close()
			for _, b := range topo.Backends {
				l, err := b.Listen(":8080")
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
				go serveShort(l)
			}
			if name == "ipvs" {
				if err := ipvsAvailable(topo); err != nil {
					t.Skip(err) // not in every kernel (this host's has none)
				}
			}
			if err := apply(topo); err != nil {
				t.Fatal(err)
			}
			if err := topo.Client.Do(func() error { return request("10.96.0.10:80") }); err != nil {
				t.Fatalf("ClusterIP: %v", err)
			}
			if err := topo.External.Do(func() error { return request("198.18.0.1:30080") }); err != nil {
				t.Fatalf("NodePort: %v", err)
			}
			if n, _ := topo.Node.ConntrackCount(); n == 0 {
				t.Fatal("the kube-proxy shapes must be using conntrack")
			}
			// The benchmark reuses one topology: a teardown must leave
			// nothing that still answers the service.
			if err := teardown(topo, name); err != nil {
				t.Fatal(err)
			}
			if err := topo.Client.Do(func() error { return request("10.96.0.10:80") }); err == nil {
				t.Fatal("ClusterIP still answers after teardown")
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

package crdstore

import (
	"testing"

	"github.com/swiftlane/swiftlane/internal/kubetest"
	"github.com/swiftlane/swiftlane/internal/store/crdstore/crdtest"
)

func TestMain(m *testing.M) { crdtest.Main(m) }

// testCluster is the shared kube-apiserver, with helpers for these tests.
type testCluster struct{ srv *kubetest.Server }

// cluster skips t without a kube-apiserver.
func cluster(t *testing.T) *testCluster { return &testCluster{srv: crdtest.Cluster(t)} }

func (c *testCluster) namespace(t *testing.T) string { return crdtest.Namespace(t, c.srv) }

// open opens a store on namespace ns, closed when t ends.
func (c *testCluster) open(t *testing.T, ns string, logSize int) *Store {
	t.Helper()
	s, err := Open(ctxT(t), Options{Config: c.srv.RESTConfig(), Namespace: ns, LogSize: logSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func (c *testCluster) kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	return crdtest.Kubectl(t, c.srv, stdin, args...)
}

// clearNodes deletes every SchedulingNode: they are cluster-scoped, so
// other tests' nodes would show up.
func (c *testCluster) clearNodes(t *testing.T) {
	t.Helper()
	c.kubectl(t, "", "delete", "schedulingnodes", "--all", "--wait=true")
}

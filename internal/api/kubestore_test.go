// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/store/crdstore"
	"github.com/swiftlane/swiftlane/internal/store/crdstore/crdtest"
)

func TestMain(m *testing.M) { crdtest.Main(m) }

// kubeBackend keeps a test's strategies in a namespace of its own on the
// shared kube-apiserver (crdtest), and skips without one.
var kubeBackend = backend{name: "kubernetes", open: openKube}

// kubeNamespaces maps a server's data directory to its namespace, so a
// restarted server (same directory) finds its strategies.
var kubeNamespaces sync.Map

func openKube(t *testing.T, dir string, logSize int) store.Store {
	t.Helper()
	srv := crdtest.Cluster(t)
	ns, ok := kubeNamespaces.Load(dir)
	if !ok {
		ns = crdtest.Namespace(t, srv)
		kubeNamespaces.Store(dir, ns)
		// Nodes are cluster-scoped: start each test without the last one's.
		crdtest.Kubectl(t, srv, "", "delete", "schedulingnodes", "--all", "--wait=true")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := crdstore.Open(ctx, crdstore.Options{Config: srv.RESTConfig(), Namespace: ns.(string), LogSize: logSize})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// kubectlIn runs kubectl in the namespace of the server whose data
// directory is dir.
func kubectlIn(t *testing.T, dir, stdin string, args ...string) string {
	t.Helper()
	ns, ok := kubeNamespaces.Load(dir)
	if !ok {
		t.Fatalf("no namespace for %s: start the server first", dir)
	}
	return crdtest.Kubectl(t, crdtest.Cluster(t), stdin, append([]string{"-n", ns.(string)}, args...)...)
}

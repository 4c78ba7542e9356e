// SPDX-License-Identifier: Apache-2.0

// Package crdtest gives a test binary one shared kube-apiserver (kubetest)
// with swiftlane's CRDs installed, and a fresh namespace per test: starting
// a control plane takes seconds, and the store's tests are many. Use Main
// from TestMain so the control plane stops when the binary ends.
package crdtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/kubetest"
)

var shared struct {
	once sync.Once
	srv  *kubetest.Server
	dir  string
	err  error
}

var nsSeq atomic.Int64

// Main runs the tests and stops the shared control plane, if one started.
func Main(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		if err := shared.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "crdtest:", err)
		}
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// Cluster is the shared control plane, started on first use; t is skipped
// when no Kubernetes binaries are configured ($SWL_K8S_BIN). If t fails,
// the control plane's log tails go to its output.
func Cluster(t testing.TB) *kubetest.Server {
	t.Helper()
	if os.Getenv(kubetest.EnvBinDir) == "" {
		t.Skipf("no kube-apiserver: set %s=$(bash lab/k8s.sh) to run the Kubernetes store's tests", kubetest.EnvBinDir)
	}
	shared.once.Do(start)
	if shared.err != nil {
		t.Fatalf("crdtest: %v", shared.err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("control plane logs:\n%s", shared.srv.Logs(40))
		}
	})
	return shared.srv
}

func start() {
	if shared.dir, shared.err = os.MkdirTemp("", "crdtest-"); shared.err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if shared.srv, shared.err = kubetest.Run(ctx, shared.dir, kubetest.Options{}); shared.err != nil {
		return
	}
	crds := filepath.Join(repoRoot(), "deploy", "helm", "swiftlane", "crds")
	if _, err := run(ctx, shared.srv, "", "apply", "-f", crds); err != nil {
		shared.err = err
		return
	}
	_, shared.err = run(ctx, shared.srv, "", "wait", "--for=condition=Established", "--timeout=60s",
		"crd/schedulingstrategies.swiftlane.io", "crd/schedulingnodes.swiftlane.io", "crd/tokenrevocations.swiftlane.io", "crd/auditentries.swiftlane.io")
}

// repoRoot is found from this file's path: tests run in their package's
// directory, which differs between the packages using this one.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
}

var nonName = regexp.MustCompile(`[^a-z0-9]+`)

// Namespace creates a namespace for t, named after it.
func Namespace(t testing.TB, s *kubetest.Server) string {
	t.Helper()
	name := strings.Trim(nonName.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	name = fmt.Sprintf("t%d-%s", nsSeq.Add(1), name)
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	Kubectl(t, s, "", "create", "namespace", name)
	return name
}

// Kubectl runs kubectl as admin with stdin, failing t (with kubectl's
// standard error) if it fails; it returns the standard output.
func Kubectl(t testing.TB, s *kubetest.Server, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := run(ctx, s, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func run(ctx context.Context, s *kubetest.Server, stdin string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := s.Command(ctx, "kubectl", args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.String(), nil
}

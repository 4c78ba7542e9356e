// SPDX-License-Identifier: Apache-2.0

package kubetest

import (
	"bytes"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// Option adjusts the Options Start runs the server with.
type Option func(*Options)

// WithExtraIPs adds IP SANs to the serving certificate, e.g. GuestHost.
func WithExtraIPs(ips ...net.IP) Option {
	return func(o *Options) { o.ExtraIPs = append(o.ExtraIPs, ips...) }
}

// WithAPIServerArgs appends kube-apiserver flags.
func WithAPIServerArgs(args ...string) Option {
	return func(o *Options) { o.APIServerArgs = append(o.APIServerArgs, args...) }
}

// Env is a control plane owned by one test.
type Env struct {
	*Server
}

// Start runs etcd and kube-apiserver for t, with their state in t.TempDir(),
// and stops them when t ends; if t failed, their logs go to t's output. The
// test is skipped when no binaries are configured (SWL_K8S_BIN unset).
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	var o Options
	for _, opt := range opts {
		opt(&o)
	}
	if o.BinDir == "" && os.Getenv(EnvBinDir) == "" {
		t.Skipf("kubetest: %s is not set: run `make test-k8s` (or set %s=$(bash lab/k8s.sh))", EnvBinDir, EnvBinDir)
	}
	start := time.Now()
	s, err := Run(t.Context(), t.TempDir(), o)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Logf("kubetest: etcd + kube-apiserver ready at %s in %s", s.ServerURL, time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("kubetest: %v", err)
		}
		if t.Failed() {
			t.Logf("kubetest: control plane logs:\n%s", s.Logs(200))
		}
	})
	return &Env{Server: s}
}

// Kubectl runs the built kubectl as admin and returns its standard output;
// it fails t, showing kubectl's standard error, if kubectl fails. Call it
// from the test's goroutine.
func (e *Env) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := e.Command(t.Context(), "kubectl", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return stdout.String()
}

// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Wrong --mode/--policy combinations fail before anything is loaded, naming
// the flag and what to use.
func TestRunFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "hybrid"}, `--mode "hybrid": use kernel or userspace`},
		{[]string{"--mode", "userspace", "--policy", "lottery"}, `--policy "lottery": use one of vruntime, fifo`},
		{[]string{"--policy", "fifo"}, "--policy fifo: policies are for --mode userspace"},
	} {
		cmd := newRunCmd()
		cmd.SetArgs(tc.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

// The endpoint `swiftlane run` and `swiftlane agent` share: /healthz always,
// /readyz only while ready, /metrics from whatever the slot holds.
func TestServeHTTP(t *testing.T) {
	var slot collectorSlot
	var ready atomic.Bool
	srv, err := serveHTTP("127.0.0.1:0", &slot, &ready)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base := "http://" + srv.Addr
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before attach: %d, want 503", code)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "swiftlane_test_total", Help: "test"})
	c.Add(3)
	slot.set(c)
	ready.Store(true)
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz while attached: %d, want 200", code)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "swiftlane_test_total 3") {
		t.Fatalf("/metrics does not serve the slot's collector:\n%s", body)
	}
	slot.set(nil)
	if _, body := get("/metrics"); strings.Contains(body, "swiftlane_test_total") {
		t.Fatalf("/metrics still serves a detached scheduler:\n%s", body)
	}
}

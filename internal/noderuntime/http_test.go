// SPDX-License-Identifier: Apache-2.0

package noderuntime

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// get fetches a path of the endpoint's server: status and body.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// serveOn serves ep on a free port until the test ends.
func serveOn(t *testing.T, ep *endpoint, profiling bool) *http.Server {
	t.Helper()
	srv, err := ep.serve("127.0.0.1:0", profiling, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// The endpoint `swiftlane run` and `swiftlane agent` share: /healthz always,
// /readyz only while ready, /metrics from whatever the slot holds.
func TestServeHTTP(t *testing.T) {
	var ep endpoint
	srv := serveOn(t, &ep, false)
	if code, _ := get(t, srv.Addr, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d", code)
	}
	if code, _ := get(t, srv.Addr, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before attach: %d, want 503", code)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "swiftlane_test_total", Help: "test"})
	c.Add(3)
	ep.slot.set(c)
	ep.ready.Store(true)
	if code, _ := get(t, srv.Addr, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz while attached: %d, want 200", code)
	}
	if _, body := get(t, srv.Addr, "/metrics"); !strings.Contains(body, "swiftlane_test_total 3") {
		t.Fatalf("/metrics does not serve the slot's collector:\n%s", body)
	}
	ep.slot.set(nil)
	if _, body := get(t, srv.Addr, "/metrics"); strings.Contains(body, "swiftlane_test_total") {
		t.Fatalf("/metrics still serves a detached scheduler:\n%s", body)
	}
	if code, _ := get(t, srv.Addr, "/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ without --profiling: %d, want 404", code)
	}
}

// --profiling adds Go's profiles; a CPU profile taken over the endpoint
// comes back in pprof's format (gzip).
func TestServeHTTPProfiling(t *testing.T) {
	var ep endpoint
	srv := serveOn(t, &ep, true)
	code, body := get(t, srv.Addr, "/debug/pprof/profile?seconds=1")
	if code != http.StatusOK || !strings.HasPrefix(body, "\x1f\x8b") {
		t.Fatalf("/debug/pprof/profile: %d, %d bytes, want 200 and a gzip'ed profile", code, len(body))
	}
	if code, _ := get(t, srv.Addr, "/metrics"); code != http.StatusOK {
		t.Fatalf("/metrics with profiling: %d", code)
	}
}

// A taken address is refused naming the flag and the way out.
func TestServeHTTPAddressInUse(t *testing.T) {
	var ep endpoint
	srv := serveOn(t, &ep, false)
	if _, err := ep.serve(srv.Addr, false, io.Discard); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Fatalf("second server on %s: %v", srv.Addr, err)
	}
}

// SPDX-License-Identifier: Apache-2.0

// Package labnet builds throw-away network namespaces joined by veth pairs
// for the load balancer's tests and benchmark. Everything it creates lives
// inside namespaces it created and is removed by Close, so traffic never
// touches the machine's own interfaces.
package labnet

import (
	"os"
	"testing"
)

// RequireEnv, when "1", turns "needs root" skips into failures: CI runs the
// tests as root and must not pass by skipping them.
const RequireEnv = "SWIFTLANE_REQUIRE_NETNS"

// RequireRoot skips t (or fails it under SWIFTLANE_REQUIRE_NETNS=1) unless
// the test can load BPF programs and create network namespaces.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	const why = "needs root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN) to load BPF and create network namespaces; run `sudo make test-lb`"
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s=1 but %s", RequireEnv, why)
	}
	t.Skip(why)
}

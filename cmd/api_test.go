// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"testing"

	"github.com/swiftlane/swiftlane/internal/config"
)

// TestDefaultAddressesAgree: `swiftlane agent` without --server or api.url
// connects where `swiftlane api` listens without --listen.
func TestDefaultAddressesAgree(t *testing.T) {
	listen := newAPICmd().Flags().Lookup("listen").DefValue
	// --server is a list (API replicas); its default is one URL.
	server, err := newAgentCmd().Flags().GetStringSlice("server")
	if err != nil || len(server) != 1 {
		t.Fatalf("agent --server defaults to %v (%v), want one URL", server, err)
	}
	if listen != config.DefaultAPIServer().Listen {
		t.Errorf("api --listen defaults to %s, the config to %s", listen, config.DefaultAPIServer().Listen)
	}
	if server[0] != "https://"+listen || config.Default().API.URL != server[0] {
		t.Errorf("agent --server defaults to %s, api.url to %s; the API serves https on %s", server[0], config.Default().API.URL, listen)
	}
}

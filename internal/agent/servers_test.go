// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/swiftlane/swiftlane/internal/auth"
)

// TestAgentServerList: --server takes several replicas; an entry that is
// not an http(s) URL is refused by name, with the form to use.
func TestAgentServerList(t *testing.T) {
	if err := CheckServers([]string{"https://10.0.0.1:8443", "http://10.0.0.2:8080"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{nil, {"https://a:1", "10.0.0.2:8443"}, {"ftp://a"}, {"https://"}} {
		err := CheckServers(bad)
		if err == nil || !strings.Contains(err.Error(), "--server") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestToken: the agent's token comes from --token-file, else is minted for
// the node with the server's key in --data-dir, else from $SWIFTLANE_TOKEN;
// with none of them the error names the flags to pass.
func TestToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent.token")
	if err := os.WriteFile(file, []byte(" tok-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := Token("", file, "n1"); err != nil || tok != "tok-from-file" {
		t.Errorf("Token(file) = %q, %v", tok, err)
	}
	dir := t.TempDir()
	a, _, err := auth.LoadOrCreateKey(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := Token(dir, "", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if c, err := a.Verify(tok); err != nil || c.Role != auth.Agent || c.Node != "n1" {
		t.Errorf("minted token: %+v %v, want an agent token for n1", c, err)
	}
	t.Setenv("SWIFTLANE_TOKEN", "tok-from-env")
	if tok, err := Token("", "", "n1"); err != nil || tok != "tok-from-env" {
		t.Errorf("Token(env) = %q, %v", tok, err)
	}
	t.Setenv("SWIFTLANE_TOKEN", "")
	if _, err := Token("", "", "n1"); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("no token: %v, want an error naming --token-file", err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"errors"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/auth"
)

// TestTokenRevokeCommand: `swiftlane token revoke` with --data-dir puts the
// token (given whole, or by id) on the deny list a server's authority reads.
func TestTokenRevokeCommand(t *testing.T) {
	dir := t.TempDir()
	server, _, err := auth.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := server.Issue("a", auth.Viewer, "", time.Hour)
	b, _, _ := server.Issue("b", auth.Viewer, "", time.Hour)
	keep, _, _ := server.Issue("c", auth.Viewer, "", time.Hour)
	bID, _, _ := server.TokenID(b)
	for _, arg := range []string{a, bID} {
		cmd := newTokenCmd()
		cmd.SetArgs([]string{"revoke", arg, "--data-dir", dir})
		if err := cmd.Execute(); err != nil {
			t.Fatalf("revoke %.20s: %v", arg, err)
		}
	}
	for _, tok := range []string{a, b} {
		if _, err := server.Verify(tok); !errors.Is(err, auth.ErrRevoked) {
			t.Errorf("revoked token verified: %v", err)
		}
	}
	if _, err := server.Verify(keep); err != nil {
		t.Errorf("other token refused: %v", err)
	}
}

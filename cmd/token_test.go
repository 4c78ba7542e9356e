// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
)

// TestTokenRevokeCommand: `swiftlane token revoke` without --server puts
// the token (given whole, or by id) on the deny list in the bolt store of
// --data-dir, which a server on that store reads; while a server holds the
// store it says to go through the server.
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
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	server.UseDenyList(st)
	for _, tok := range []string{a, b} {
		if _, err := server.Verify(tok); !errors.Is(err, auth.ErrRevoked) {
			t.Errorf("revoked token verified: %v", err)
		}
	}
	if _, err := server.Verify(keep); err != nil {
		t.Errorf("other token refused: %v", err)
	}
	// No server saw the revocations: the command put them in the history.
	aID, _, _ := server.TokenID(a)
	hist, _, err := st.ListAudit(context.Background(), apitypes.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range hist {
		got = append(got, fmt.Sprintf("%s %s/%s %s %s %v", e.Operation, e.Object.Kind, e.Object.Name, e.Role, e.Outcome, strings.HasPrefix(e.Subject, "cli:")))
	}
	if want := []string{"token.revoke token/" + bID + " local ok true", "token.revoke token/" + aID + " local ok true"}; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("audit history:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The store is open (as a running server holds it).
	cmd := newTokenCmd()
	cmd.SetArgs([]string{"revoke", bID, "--data-dir", dir})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "--server") {
		t.Errorf("revoke while a server holds the store: %v, want a hint to use --server", err)
	}
}

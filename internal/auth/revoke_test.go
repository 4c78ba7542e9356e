// SPDX-License-Identifier: Apache-2.0

package auth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
)

// TestImportDenyFile: the entries of an old revoked.json that have not
// expired move into the store's deny list; a data directory without one
// imports nothing.
func TestImportDenyFile(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	if found, _, _, err := auth.ImportDenyFile(context.Background(), dir, st, now); found || err != nil {
		t.Fatalf("no file: %v %v", found, err)
	}
	old := `{"0a1b2c3d4e5f60718293a4b5": "` + now.Add(time.Hour).UTC().Format(time.RFC3339) + `",
	         "Old_base64-Id": "` + now.Add(time.Hour).UTC().Format(time.RFC3339) + `",
	         "ffff": "` + now.Add(-time.Hour).UTC().Format(time.RFC3339) + `"}`
	if err := os.WriteFile(filepath.Join(dir, auth.DenyFile), []byte(old), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o500); err != nil { // read-only, as the chart mounts it
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	found, n, expired, err := auth.ImportDenyFile(context.Background(), dir, st, now)
	if !found || n != 2 || expired != 1 || err != nil {
		t.Fatalf("import: found %v, %d imported, %d expired, %v", found, n, expired, err)
	}
	for id, want := range map[string]bool{"0a1b2c3d4e5f60718293a4b5": true, "Old_base64-Id": true, "ffff": false, "other": false} {
		if got, err := st.TokenRevoked(id); got != want || err != nil {
			t.Errorf("%s revoked: %v %v, want %v", id, got, err, want)
		}
	}
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, auth.DenyFile), []byte("{"), 0o600)
	if _, _, _, err := auth.ImportDenyFile(context.Background(), bad, st, now); err == nil || !strings.Contains(err.Error(), auth.DenyFile) {
		t.Errorf("corrupt file: %v, want an error naming it", err)
	}
}

// TestRenew: a renewal keeps subject, role and node, gets a new id and
// expiry, and belongs to the first token's chain: revoking that id refuses
// every renewal. An expired token does not verify, so it cannot be renewed.
func TestRenew(t *testing.T) {
	a, _, err := auth.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a.UseDenyList(st)
	first, _, _ := a.Issue("agent:n1", auth.Agent, "n1", time.Hour)
	c1, err := a.Verify(first)
	if err != nil {
		t.Fatal(err)
	}
	second, exp, err := a.Renew(c1, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := a.Verify(second)
	if err != nil || c2.Subject != "agent:n1" || c2.Role != auth.Agent || c2.Node != "n1" || c2.ID == c1.ID ||
		c2.Family != c1.ID || !c2.ExpiresAt.Equal(exp) || time.Until(exp) < time.Hour+59*time.Minute {
		t.Fatalf("renewed: %+v %v", c2, err)
	}
	third, _, _ := a.Renew(c2, time.Hour)
	if c3, err := a.Verify(third); err != nil || c3.Family != c1.ID {
		t.Fatalf("renewed twice: %+v %v", c3, err)
	}
	if _, err := a.Revoke(context.Background(), c1.ID, time.Time{}, "test"); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{first, second, third} {
		if _, err := a.Verify(tok); !errors.Is(err, auth.ErrRevoked) {
			t.Errorf("chain member verified after its first token was revoked: %v", err)
		}
	}
	old := a.WithClock(func() time.Time { return time.Now().Add(-2 * time.Hour) })
	expired, _, _ := old.Issue("viewer", auth.Viewer, "", time.Hour)
	if _, err := a.Verify(expired); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired token: %v", err)
	}
}

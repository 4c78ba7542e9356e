// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/api"
	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// ctlServer serves a real API server over a bolt store in a temporary
// directory on loopback until t ends; it returns its authority, its URL
// and a context that ends with t.
func ctlServer(t *testing.T) (*auth.Authority, string, context.Context) {
	t.Helper()
	dir := t.TempDir()
	a, _, err := auth.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(api.Options{Store: st, Auth: a, Version: "ctl-test"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { srv.Serve(ctx, ln, nil); close(served) }()
	t.Cleanup(func() { cancel(); <-served; st.Close() })
	return a, "http://" + ln.Addr().String(), ctx
}

// runCtl runs `swiftlane ctl args... --server url` with token, returning
// its standard output and error.
func runCtl(ctx context.Context, t *testing.T, url, token string, args ...string) (string, string, error) {
	t.Setenv("SWIFTLANE_TOKEN", token)
	c := newCtlCmd()
	var out, errOut bytes.Buffer
	c.SetOut(&out)
	c.SetErr(&errOut)
	c.SetArgs(append(args, "--server", url))
	err := c.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// TestCtlAudit: `swiftlane ctl audit` prints a real server's audit history
// as a table (newest first, the next page's --continue on stderr) and as
// JSON, pages with --limit and --continue, filters, and is refused to a
// viewer.
func TestCtlAudit(t *testing.T) {
	a, url, ctx := ctlServer(t)
	adminTok, _, _ := a.Issue("alice", auth.Admin, "", time.Hour)
	admin := apiclient.NewClient(url, adminTok, nil)
	if _, err := admin.CreateStrategy(ctx, apitypes.Strategy{Strategy: strategy.Strategy{Name: "gnb", Class: new(strategy.High), CommandRegex: "nr-gnb"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.DeleteStrategy(ctx, "gnb"); err != nil {
		t.Fatal(err)
	}

	ctl := func(token string, args ...string) (string, string, error) { return runCtl(ctx, t, url, token, args...) }
	out, _, err := ctl(adminTok, "audit")
	if err != nil {
		t.Fatalf("audit: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TIME") || !strings.Contains(lines[1], "strategy.delete") ||
		!strings.Contains(lines[1], "strategy/gnb") || !strings.Contains(lines[1], "alice") || !strings.Contains(lines[2], "strategy.create") {
		t.Fatalf("table:\n%s", out)
	}
	out, hint, err := ctl(adminTok, "audit", "--limit", "1")
	if err != nil || strings.Count(out, "\n") != 2 || !strings.Contains(out, "strategy.delete") || !strings.Contains(hint, "--continue ") {
		t.Fatalf("--limit 1: %v\n%s\nstderr: %s", err, out, hint)
	}
	next := strings.TrimSpace(hint[strings.Index(hint, "--continue ")+len("--continue "):])
	out, _, err = ctl(adminTok, "audit", "--continue", next, "-o", "json")
	var l apitypes.AuditList
	if err != nil || json.Unmarshal([]byte(out), &l) != nil || len(l.Entries) != 1 || l.Entries[0].Operation != apitypes.AuditStrategyCreate ||
		l.Entries[0].Subject != "alice" || l.Entries[0].Role != "admin" || l.Continue != "" {
		t.Fatalf("--continue %s -o json: %v\n%s", next, err, out)
	}
	if out, _, err = ctl(adminTok, "audit", "--operation", "strategy.delete", "-o", "json"); err != nil || json.Unmarshal([]byte(out), &l) != nil || len(l.Entries) != 1 {
		t.Fatalf("--operation strategy.delete: %v\n%s", err, out)
	}
	viewerTok, _, _ := a.Issue("vera", auth.Viewer, "", time.Hour)
	if _, _, err := ctl(viewerTok, "audit"); err == nil || !strings.Contains(err.Error(), "viewer") {
		t.Errorf("a viewer's audit: %v, want a refusal naming the role", err)
	}
}

// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// lockedBuffer is a log sink the server writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines are the JSON log records with msg.
func (l *lockedBuffer) lines(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// auditLine is an entry as the tests compare it.
func auditLine(e apitypes.AuditEntry) string {
	return fmt.Sprintf("%s %s/%s by %s (%s%s) %s %d", e.Operation, e.Object.Kind, e.Object.Name, e.Subject, e.Role,
		map[bool]string{true: " node " + e.Node}[e.Node != ""], e.Outcome, e.Status)
}

// TestAuditHistory: changes made over HTTP are in GET /api/v2/audit, newest
// first, with the caller's subject, role, node and token, the object and
// the outcome, refusals included; calls refused for their token or role
// are logged but not kept; only admins read it; pages and filters work;
// every entry is also a structured log line; the history survives a
// restart on the same data directory (or namespace).
func TestAuditHistory(t *testing.T) { eachStore(t, testAuditHistory) }

func testAuditHistory(t *testing.T, bk backend) {
	dir := t.TempDir()
	logs := &lockedBuffer{}
	ts := startServer(t, dir, serverOpt{backend: bk, log: slog.New(slog.NewJSONHandler(logs, nil))})
	tok := func(subject string, role auth.Role, node string) string {
		s, _, err := ts.auth.Issue(subject, role, node, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	alice, vera := tok("alice", auth.Admin, ""), tok("vera", auth.Viewer, "")
	aliceID, _, _ := ts.auth.TokenID(alice)
	admin := ts.client(alice)
	for _, step := range []func() error{
		func() error { _, err := admin.CreateStrategy(bg(), critical("a", "x")); return err },
		func() error { _, err := admin.PutStrategy(bg(), critical("a", "y")); return err },
		func() error { _, err := admin.PutStrategy(bg(), critical("b", "z")); return err },
		func() error { _, err := admin.DeleteStrategy(bg(), "a"); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.CreateStrategy(bg(), critical("b", "z")); !apiclient.IsStatus(err, 409) {
		t.Fatalf("a second b: %v, want a 409", err)
	}
	agentTok, err := admin.CreateToken(bg(), apitypes.TokenRequest{Role: "agent", Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := ts.client(agentTok.Token).RenewToken(bg(), apitypes.RenewRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RevokeToken(bg(), apitypes.RevokeRequest{ID: renewed.ID}); err != nil {
		t.Fatal(err)
	}
	// Refused for the token or its role: logged, not kept.
	if code, body := ts.raw("DELETE", "/api/v1/strategies/b", vera, ""); code != 403 {
		t.Fatalf("a viewer's delete: %d %s", code, body)
	}
	if code, body := ts.raw("POST", "/api/v1/strategies", "", `{"name":"c","class":"high","command_regex":"x"}`); code != 401 {
		t.Fatalf("a create without a token: %d %s", code, body)
	}
	// Only admins read the history.
	for who, token := range map[string]string{"viewer": vera, "agent": tok("n2", auth.Agent, "n2")} {
		if code, body := ts.raw("GET", "/api/v2/audit", token, ""); code != 403 {
			t.Errorf("%s reads the history: %d %s", who, code, body)
		}
	}
	if code, _ := ts.raw("GET", "/api/v2/audit", "", ""); code != 401 {
		t.Errorf("no token reads the history: %d", code)
	}

	want := []string{
		"token.revoke token/" + renewed.ID + " by alice (admin) ok 200",
		"token.renew token/" + renewed.ID + " by by:alice (agent node n1) ok 200",
		"token.issue token/" + agentTok.ID + " by alice (admin) ok 201",
		"strategy.create strategy/b by alice (admin) refused 409",
		"strategy.delete strategy/a by alice (admin) ok 200",
		"strategy.create strategy/b by alice (admin) ok 201",
		"strategy.update strategy/a by alice (admin) ok 200",
		"strategy.create strategy/a by alice (admin) ok 201",
	}
	l, err := admin.ListAudit(bg(), apitypes.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range l.Entries {
		got = append(got, auditLine(e))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || l.Continue != "" {
		t.Fatalf("history:\n%s\nwant:\n%s\n(continue %q)", strings.Join(got, "\n"), strings.Join(want, "\n"), l.Continue)
	}
	for _, e := range l.Entries {
		wantTok := aliceID
		if e.Operation == apitypes.AuditTokenRenew {
			wantTok = agentTok.ID
		}
		if e.TokenID != wantTok || e.Time.IsZero() || e.Source == "" || e.ID == "" {
			t.Errorf("%s: token %q (want %q), time %s, source %q, id %q", auditLine(e), e.TokenID, wantTok, e.Time, e.Source, e.ID)
		}
	}
	if e := l.Entries[3]; !strings.Contains(e.Error, "already exists") {
		t.Errorf("the refused create's error: %q", e.Error)
	}
	if e := l.Entries[2]; !strings.Contains(e.Detail, "agent") || !strings.Contains(e.Detail, "node n1") {
		t.Errorf("the issue's detail: %q", e.Detail)
	}
	if e := l.Entries[4]; e.Revision == 0 {
		t.Errorf("the delete has no revision: %+v", e)
	}

	// Every entry is a log line too; the refused ones say they were not kept.
	lines := logs.lines("audit")
	var kept, dropped []string
	for _, m := range lines {
		s := fmt.Sprintf("%s %s/%s by %s %v", m["operation"], m["kind"], m["object"], m["subject"], m["status"])
		if m["kept"] == true {
			kept = append(kept, s)
		} else {
			dropped = append(dropped, s)
		}
	}
	if len(kept) != len(want) || kept[0] != "strategy.create strategy/a by alice 201" {
		t.Errorf("log lines kept: %q", kept)
	}
	if strings.Join(dropped, ";") != "strategy.delete strategy/b by vera 403;strategy.create strategy/ by  401" {
		t.Errorf("log lines not kept: %q", dropped)
	}

	// Pages of 3 are the history in order; filters.
	var paged []string
	q := apitypes.AuditQuery{Limit: 3}
	for n := 0; ; n++ {
		p, err := admin.ListAudit(bg(), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Entries) != min(3, len(want)-3*n) {
			t.Fatalf("page %d: %d entries", n, len(p.Entries))
		}
		for _, e := range p.Entries {
			paged = append(paged, auditLine(e))
		}
		if p.Continue == "" {
			break
		}
		q.Before = p.Continue
	}
	if strings.Join(paged, "\n") != strings.Join(want, "\n") {
		t.Errorf("paged:\n%s", strings.Join(paged, "\n"))
	}
	for _, f := range []struct {
		q    apitypes.AuditQuery
		want int
	}{
		{apitypes.AuditQuery{Subject: "by:alice"}, 1},
		{apitypes.AuditQuery{Kind: "strategy"}, 5},
		{apitypes.AuditQuery{Kind: "strategy", Name: "a"}, 3},
		{apitypes.AuditQuery{Operation: apitypes.AuditStrategyCreate, Limit: 2}, 2},
	} {
		if p, err := admin.ListAudit(bg(), f.q); err != nil || len(p.Entries) != f.want {
			t.Errorf("%+v: %d entries, want %d (%v)", f.q, len(p.Entries), f.want, err)
		}
	}
	for _, bad := range []struct{ query, field string }{
		{"limit=0", "limit"}, {"limit=1001", "limit"}, {"limit=x", "limit"},
		{"continue=XYZ", "continue"}, {"operation=strategy.burn", "operation"}, {"subject=", "subject"},
	} {
		code, body := ts.raw("GET", "/api/v2/audit?"+bad.query, alice, "")
		var e apitypes.Error
		if code != 400 || json.Unmarshal(body, &e) != nil || e.Field != bad.field || e.Hint == "" {
			t.Errorf("?%s: %d %s, want a 400 on %s", bad.query, code, body, bad.field)
		}
	}

	// A generation-1 list records what it changed, and nothing when posted
	// again unchanged (clients re-post it every few seconds).
	gen1 := `{"strategies":[{"name":"g1","priority":true,"command_regex":"x"}]}`
	for i := range 2 {
		if code, body := ts.raw("POST", "/api/v1/scheduling/strategies", alice, gen1); code != 200 {
			t.Fatalf("generation-1 post %d: %d %s", i, code, body)
		}
	}
	l2, err := admin.ListAudit(bg(), apitypes.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l2.Entries) != len(want)+1 || auditLine(l2.Entries[0]) != "strategy.create strategy/g1 by alice (admin) ok 200" ||
		!strings.Contains(l2.Entries[0].Detail, "generation-1") {
		t.Fatalf("after two identical generation-1 posts: %d entries, newest %+v", len(l2.Entries), l2.Entries[0])
	}

	// The same history after a restart.
	ts.stop()
	ts2 := startServer(t, dir, serverOpt{backend: bk})
	l3, err := ts2.client(alice).ListAudit(bg(), apitypes.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if mustJSON(l3) != mustJSON(l2) {
		t.Errorf("after a restart:\n%s\nbefore:\n%s", mustJSON(l3), mustJSON(l2))
	}
}

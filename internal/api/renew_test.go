// SPDX-License-Identifier: Apache-2.0

package api

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// TestTokenRenewal: POST /api/v1/tokens/renew gives a fresh token for the
// same node and role, for the server's agent lifetime (24 h) or less;
// it refuses revoked and expired tokens, and longer lifetimes (403); revoking a
// renewed token (whole) revokes its chain.
func TestTokenRenewal(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		ts := startServer(t, t.TempDir(), serverOpt{backend: b})
		admin := ts.client(ts.token(auth.Admin, ""))
		orig, err := admin.CreateToken(bg(), apitypes.TokenRequest{Role: "agent", Node: "n1"})
		if err != nil || time.Until(orig.ExpiresAt) > auth.DefaultAgentTTL {
			t.Fatalf("agent token: %+v %v, want at most %s", orig, err, auth.DefaultAgentTTL)
		}
		r, err := ts.client(orig.Token).RenewToken(bg(), apitypes.RenewRequest{})
		if err != nil || r.Role != "agent" || r.Node != "n1" || r.ID == "" || r.ID == orig.ID || r.Token == orig.Token ||
			time.Until(r.ExpiresAt) < auth.DefaultAgentTTL-time.Minute || time.Until(r.ExpiresAt) > auth.DefaultAgentTTL {
			t.Fatalf("renew: %+v %v", r, err)
		}
		renewed := ts.client(r.Token)
		if _, err := renewed.RegisterNode(bg(), "n1", apitypes.Registration{Mode: "observe", HeartbeatSeconds: 5}); err != nil {
			t.Fatalf("renewed token as its node: %v", err)
		}
		if _, err := renewed.RegisterNode(bg(), "n2", apitypes.Registration{Mode: "observe", HeartbeatSeconds: 5}); !apiclient.IsStatus(err, 403) {
			t.Fatalf("renewed token as another node: %v", err)
		}
		short, err := renewed.RenewToken(bg(), apitypes.RenewRequest{TTLSeconds: 600})
		if err != nil || time.Until(short.ExpiresAt) > 10*time.Minute {
			t.Fatalf("renew for 10 min: %+v %v", short, err)
		}
		_, err = renewed.RenewToken(bg(), apitypes.RenewRequest{TTLSeconds: int64(auth.DefaultAgentTTL/time.Second) + 1})
		var e *apitypes.Error
		if !apiclient.IsStatus(err, 403) || !errors.As(err, &e) || e.Field != "ttl_seconds" || !strings.Contains(e.Hint, "86400") {
			t.Fatalf("renew for longer than the agent lifetime: %v", err)
		}
		// Expired: refused, whoever signed it.
		expired, _, _ := ts.auth.WithClock(func() time.Time { return time.Now().Add(-2 * time.Hour) }).Issue("old", auth.Viewer, "", time.Hour)
		if _, err := ts.client(expired).RenewToken(bg(), apitypes.RenewRequest{}); !apiclient.IsStatus(err, 401) {
			t.Fatalf("renew an expired token: %v", err)
		}
		// Revoking the renewed token (whole) revokes the chain: the
		// first token and the other renewal too, and none renews.
		if _, err := admin.RevokeToken(bg(), apitypes.RevokeRequest{Token: r.Token}); err != nil {
			t.Fatal(err)
		}
		for _, tok := range []string{orig.Token, r.Token, short.Token} {
			if _, err := ts.client(tok).RenewToken(bg(), apitypes.RenewRequest{}); !apiclient.IsStatus(err, 401) {
				t.Errorf("renew a revoked token: %v", err)
			}
		}
	})
}

// TestRenewer: a token with a third of its life left is renewed at once,
// the client sends the renewal from then on, and it is written back to the
// token file.
func TestRenewer(t *testing.T) {
	ts := startServer(t, t.TempDir(), serverOpt{})
	// 59 of its 60 minutes are gone.
	tok, _, err := ts.auth.WithClock(func() time.Time { return time.Now().Add(-59 * time.Minute) }).Issue("agent:n1", auth.Agent, "n1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "agent.token")
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := ts.client("")
	r := apiclient.NewRenewer(base, apiclient.TokenFile(file), file, nil)
	renewed := make(chan apitypes.TokenResponse, 1)
	r.OnRenew = func(tr apitypes.TokenResponse) {
		select {
		case renewed <- tr:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var tr apitypes.TokenResponse
	select {
	case tr = <-renewed:
	case <-time.After(30 * time.Second):
		t.Fatal("not renewed")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if cur, err := r.Token(); err != nil || cur != tr.Token {
		t.Fatalf("token after renewal: %.20s %v, want the renewal", cur, err)
	}
	if b, _ := os.ReadFile(file); strings.TrimSpace(string(b)) != tr.Token {
		t.Fatalf("token file not rewritten: %.30s", b)
	}
	c := base.WithTokenSource(r.Token)
	if _, err := c.RegisterNode(bg(), "n1", apitypes.Registration{Mode: "observe", HeartbeatSeconds: 5}); err != nil {
		t.Fatalf("request with the renewed token: %v", err)
	}
}

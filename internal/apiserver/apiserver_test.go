// SPDX-License-Identifier: Apache-2.0

package apiserver

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/config"
)

// TestAPIConfigFile runs the server as a config file says: the listen
// address, plain HTTP, the signing key's path, token lifetimes and default
// strategies take effect, and a restart does not re-create a default
// strategy an admin changed.
func TestAPIConfigFile(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // Run listens on it again
	key := filepath.Join(t.TempDir(), "keys", "api.key")
	os.MkdirAll(filepath.Dir(key), 0o700)
	file := filepath.Join(dir, "api.yaml")
	os.WriteFile(file, []byte(`listen: `+addr+`
data_dir: `+filepath.Join(dir, "data")+`
tls: {insecure_http: true}
log: {level: warn, format: json}
timeouts: {write: 5s}
tokens: {login_ttl: 2h, ttl: 3h, signing_key: `+key+`}
audit: {max_entries: 4}
default_strategies:
  - {name: gnb, class: critical, command_regex: nr-gnb}
`), 0o600)
	cfg, err := config.LoadAPIServer(file)
	if err != nil {
		t.Fatal(err)
	}
	start := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- Run(ctx, cfg, slog.New(slog.DiscardHandler), "test") }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	stop := start()
	c := apiclient.NewClient("http://"+addr, "", nil)
	// Wait for the listener: connection refused until Run listens.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Health(context.Background())
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			t.Fatalf("server not up: %v", err)
		}
	}
	if _, err := os.Stat(key); err != nil {
		t.Fatalf("signing key not at tokens.signing_key: %v", err)
	}
	cred, err := os.ReadFile(filepath.Join(cfg.DataDir, auth.CredentialFile))
	if err != nil {
		t.Fatal(err)
	}
	login, err := c.Login(context.Background(), "admin", strings.TrimSpace(string(cred)))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(login.ExpiresAt); d < 2*time.Hour-time.Minute || d > 2*time.Hour {
		t.Errorf("login token lives %s, want tokens.login_ttl 2h", d)
	}
	admin := c.WithToken(login.Token)
	viewer, err := admin.CreateToken(context.Background(), apitypes.TokenRequest{Role: "viewer"})
	if err != nil || time.Until(viewer.ExpiresAt) < 3*time.Hour-time.Minute {
		t.Errorf("viewer token: %+v %v, want tokens.ttl 3h", viewer, err)
	}
	gnb, err := admin.GetStrategy(context.Background(), "gnb")
	if err != nil || gnb.CommandRegex != "nr-gnb" {
		t.Fatalf("default strategy: %+v %v", gnb, err)
	}
	gnb.CommandRegex = "nr-gnb|nr-ue"
	if _, err := admin.PutStrategy(context.Background(), gnb.Strategy); err != nil {
		t.Fatal(err)
	}
	// The audit history has every change, the server's own included.
	history := func() string {
		t.Helper()
		l, err := admin.ListAudit(context.Background(), apitypes.AuditQuery{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range l.Entries {
			out = append(out, e.Operation+" "+e.Object.Kind+"/"+map[bool]string{true: e.Object.Name}[e.Object.Kind != "token"]+" "+e.Subject)
		}
		return strings.Join(out, "; ")
	}
	want := "strategy.update strategy/gnb admin; token.issue token/ admin; token.issue token/ admin; strategy.create strategy/gnb config:default_strategies"
	if got := history(); got != want {
		t.Errorf("audit history:\n%s\nwant:\n%s", got, want)
	}
	stop()
	stop = start()
	defer stop()
	deadline = time.Now().Add(10 * time.Second)
	for {
		got, err := admin.GetStrategy(context.Background(), "gnb")
		if err == nil {
			if got.CommandRegex != "nr-gnb|nr-ue" {
				t.Fatalf("restart overwrote the admin's edit of a default strategy: %+v", got)
			}
			break
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			t.Fatalf("after restart: %v", err)
		}
	}
	// audit.max_entries: a fifth change pushes the oldest out.
	if _, err := admin.DeleteStrategy(context.Background(), "gnb"); err != nil {
		t.Fatal(err)
	}
	want = "strategy.delete strategy/gnb admin; " + strings.TrimSuffix(want, "; strategy.create strategy/gnb config:default_strategies")
	if got := history(); got != want {
		t.Errorf("audit history after a restart and a delete (audit.max_entries 4):\n%s\nwant:\n%s", got, want)
	}
}

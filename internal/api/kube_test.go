// SPDX-License-Identifier: Apache-2.0

package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// Tests of what only the Kubernetes store does: the API server behind it
// validates too, and others (kubectl, other replicas) write to it.

func kubeOnly(t *testing.T) *testServer {
	t.Helper()
	return startServer(t, t.TempDir(), serverOpt{backend: kubeBackend})
}

// TestKubernetesValidationIsA400: what the CRD's schema or CEL rules refuse
// (and the API's own validation lets through) is a 400 naming the API's
// field, for single writes and generation-1 lists, and writes nothing.
func TestKubernetesValidationIsA400(t *testing.T) {
	ts := kubeOnly(t)
	admin := ts.token(auth.Admin, "")
	c := ts.client(admin)
	if _, err := c.CreateStrategy(bg(), critical("keep", "x")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		method, path, body string
		field              string
	}{
		{"POST", "/api/v1/strategies", `{"name":"a","class":"high","command_regex":"x","namespaces":["free5gc"]}`, "namespaces"},
		{"POST", "/api/v1/strategies", `{"name":"a_b","class":"high","command_regex":"x"}`, "name"},
		{"PUT", "/api/v1/strategies/keep", `{"class":"high","command_regex":"` + strings.Repeat("a", 1025) + `"}`, "command_regex"},
		{"POST", "/api/v1/scheduling/strategies", `{"strategies":[{"priority":true,"command_regex":"x"},{"priority":true,"command_regex":"y","namespaces":["oai"]}]}`, "strategies[1].namespaces"},
	}
	before, _ := c.ListStrategies(bg())
	for _, tc := range cases {
		code, body := ts.raw(tc.method, tc.path, admin, tc.body)
		var e apitypes.Error
		if code != 400 || json.Unmarshal(body, &e) != nil || e.Field != tc.field || e.Err == "" || e.Hint == "" {
			t.Errorf("%s %s %.70s: %d %s, want 400 on %s", tc.method, tc.path, tc.body, code, body, tc.field)
		}
		if after, _ := c.ListStrategies(bg()); mustJSON(after) != mustJSON(before) {
			t.Errorf("%s %s %.70s: store changed on a refused write", tc.method, tc.path, tc.body)
		}
	}
}

// TestKubectlStrategiesReachWatchers: a strategy applied with kubectl is
// listed and pushed to open watch streams with no API write to wake them;
// one the API cannot represent is neither.
func TestKubectlStrategiesReachWatchers(t *testing.T) {
	ts := kubeOnly(t)
	agent := ts.client(ts.token(auth.Agent, "n1"))
	ch, _ := watcher(t, agent, 0)
	if ev := next(t, ch); ev.Type != "sync" || len(ev.Strategies) != 0 {
		t.Fatalf("first event: %+v", ev)
	}
	kubectlIn(t, ts.dir, `
apiVersion: swiftlane.io/v1alpha1
kind: SchedulingStrategy
metadata: {name: every-pod}
spec: {podSelector: {}, class: high}
---
apiVersion: swiftlane.io/v1alpha1
kind: SchedulingStrategy
metadata: {name: gnb}
spec: {commandRegex: nr-gnb, class: critical, inherit: true}
`, "apply", "-f", "-")
	ev := next(t, ch)
	if ev.Type != "put" || ev.Name != "gnb" || ev.Strategy == nil || !ev.Strategy.Inherit {
		t.Fatalf("kubectl apply: %+v", ev)
	}
	l, err := agent.ListStrategies(bg())
	if err != nil || len(l.Strategies) != 1 || l.Strategies[0].Name != "gnb" || l.Revision != ev.Revision {
		t.Fatalf("list: %+v %v", l, err)
	}
	kubectlIn(t, ts.dir, "", "delete", "schedulingstrategy", "gnb")
	if ev := next(t, ch); ev.Type != "delete" || ev.Name != "gnb" {
		t.Fatalf("kubectl delete: %+v", ev)
	}
}

// TestRevocationAcrossReplicas: two API replicas on one namespace (the
// chart's deployment with replicas: 2); a token revoked through either is
// refused by both within a second, and the first replica refuses it as
// soon as the revoke returns.
func TestRevocationAcrossReplicas(t *testing.T) {
	dir := t.TempDir() // one signing key and namespace for both
	r1 := startServer(t, dir, serverOpt{backend: kubeBackend})
	r2 := startServer(t, dir, serverOpt{backend: kubeBackend})
	var worst time.Duration
	for i, pair := range [][2]*testServer{{r1, r2}, {r2, r1}} {
		via, other := pair[0], pair[1]
		admin := via.client(via.token(auth.Admin, ""))
		tr, err := admin.CreateToken(bg(), apitypes.TokenRequest{Role: "agent", Node: fmt.Sprintf("n%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []*testServer{via, other} {
			if _, err := r.client(tr.Token).ListStrategies(bg()); err != nil {
				t.Fatalf("fresh token refused: %v", err)
			}
		}
		if _, err := admin.RevokeToken(bg(), apitypes.RevokeRequest{ID: tr.ID}); err != nil {
			t.Fatal(err)
		}
		revoked := time.Now()
		if _, err := via.client(tr.Token).ListStrategies(bg()); !apiclient.IsStatus(err, 401) {
			t.Fatalf("the replica that revoked it still accepts it: %v", err)
		}
		// Ask the other replica until it refuses: this measures how long
		// its watch takes, it does not wait for it.
		for {
			_, err := other.client(tr.Token).ListStrategies(bg())
			if apiclient.IsStatus(err, 401) {
				break
			}
			if err != nil {
				t.Fatalf("other replica: %v", err)
			}
			if time.Since(revoked) > time.Second {
				t.Fatalf("revoked through replica %d, still accepted by the other after %s", i+1, time.Since(revoked))
			}
			time.Sleep(2 * time.Millisecond)
		}
		worst = max(worst, time.Since(revoked))
	}
	t.Logf("the other replica refused a revoked token after at most %s", worst)
}

// TestAuditAcrossReplicas: two API replicas on one namespace; a change
// through either is in the other's GET /api/v2/audit within a second, with
// the replica that made it.
func TestAuditAcrossReplicas(t *testing.T) {
	dir := t.TempDir()
	r1 := startServer(t, dir, serverOpt{backend: kubeBackend})
	r2 := startServer(t, dir, serverOpt{backend: kubeBackend})
	alice, _, err := r1.auth.Issue("alice", auth.Admin, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var worst time.Duration
	for i, step := range []struct {
		via, other *testServer
		change     func(*apiclient.Client) error
		want       string
	}{
		{r1, r2, func(c *apiclient.Client) error {
			_, err := c.CreateStrategy(bg(), critical("gnb", "nr-gnb"))
			return err
		}, "strategy.create strategy/gnb by alice (admin) ok 201"},
		{r2, r1, func(c *apiclient.Client) error { _, err := c.DeleteStrategy(bg(), "gnb"); return err }, "strategy.delete strategy/gnb by alice (admin) ok 200"},
	} {
		if err := step.change(step.via.client(alice)); err != nil {
			t.Fatal(err)
		}
		done := time.Now()
		// Ask the other replica until it has it: this measures its watch.
		for {
			l, err := step.other.client(alice).ListAudit(bg(), apitypes.AuditQuery{Limit: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Entries) == 1 && auditLine(l.Entries[0]) == step.want {
				break
			}
			if time.Since(done) > time.Second {
				t.Fatalf("step %d: the other replica's newest entry after %s: %+v, want %s", i, time.Since(done), l.Entries, step.want)
			}
			time.Sleep(2 * time.Millisecond)
		}
		worst = max(worst, time.Since(done))
	}
	t.Logf("a change was in the other replica's audit history after at most %s", worst)
}

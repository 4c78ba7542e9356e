// SPDX-License-Identifier: Apache-2.0

// Package replicatest measures what several API replicas on one store agree
// on, for the tests that run them: on the kube-apiserver test control plane
// with the chart's rendered arguments (test/k8s) and as the chart's pods in
// the cluster lab (test/vm). Today: how soon a token revoked through one
// replica is refused by every replica.
package replicatest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
)

// RevokeBound is issue 42's goal: a token revoked through one replica is
// refused by every replica within a second.
const RevokeBound = time.Second

// probeNode is never registered: a request for it with an accepted token
// gets 404, with a refused one 401, whatever the token's role.
const probeNode = "revoke-probe"

// Revoke mints a viewer and an agent token through reps[0] with the admin
// token, checks that every replica accepts both, then revokes the viewer
// token whole through reps[0] and the agent token by id through the last
// replica, and asks every replica every 5 ms until each refuses the token.
// A refusal later than bound after the revoke's answer fails t. It returns
// the revoked tokens' ids, and per revoke and replica the milliseconds from
// the answer to the refusal (keys revoke_via_replicaN_refused_by_replicaM_ms),
// having logged those and the times from the request.
func Revoke(ctx context.Context, t testing.TB, reps []*apiclient.Client, admin string, bound time.Duration) (ids []string, ms map[string]float64) {
	t.Helper()
	viewer, err := reps[0].WithToken(admin).CreateToken(ctx, apitypes.TokenRequest{Role: "viewer"})
	if err != nil {
		t.Fatalf("mint a viewer token through replica 0: %v", err)
	}
	agent, err := reps[0].WithToken(admin).CreateToken(ctx, apitypes.TokenRequest{Role: "agent", Node: probeNode})
	if err != nil {
		t.Fatalf("mint an agent token through replica 0: %v", err)
	}
	for _, tok := range []apitypes.TokenResponse{viewer, agent} {
		for i, r := range reps {
			if err := probe(ctx, r, tok.Token); !apiclient.IsStatus(err, http.StatusNotFound) {
				t.Fatalf("the new %s token on replica %d: %v, want 404 (accepted, no such node)", tok.Role, i, err)
			}
		}
	}
	ms = map[string]float64{}
	last := len(reps) - 1
	for _, c := range []struct {
		what    string
		through int
		req     apitypes.RevokeRequest
		tok     string
	}{
		{"viewer token, whole", 0, apitypes.RevokeRequest{Token: viewer.Token}, viewer.Token},
		{"agent token, by id", last, apitypes.RevokeRequest{ID: agent.ID}, agent.Token},
	} {
		sent := time.Now()
		if _, err := reps[c.through].WithToken(admin).RevokeToken(ctx, c.req); err != nil {
			t.Fatalf("revoke the %s through replica %d: %v", c.what, c.through, err)
		}
		answered := time.Now()
		for i, at := range awaitRefusal(ctx, reps, c.tok, 10*bound) {
			if at.IsZero() {
				t.Errorf("%s revoked through replica %d: replica %d still accepts it %v after the answer", c.what, c.through, i, 10*bound)
				continue
			}
			afterAnswer := max(at.Sub(answered), 0)
			t.Logf("%s revoked through replica %d: replica %d refuses it %v after the revoke's answer (%v after its request)",
				c.what, c.through, i, afterAnswer.Round(time.Millisecond), at.Sub(sent).Round(time.Millisecond))
			ms[fmt.Sprintf("revoke_via_replica%d_refused_by_replica%d_ms", c.through, i)] = float64(afterAnswer.Microseconds()) / 1000
			if afterAnswer > bound {
				t.Errorf("%s revoked through replica %d: replica %d refused it only %v after the answer, want within %v", c.what, c.through, i, afterAnswer, bound)
			}
		}
	}
	return []string{viewer.ID, agent.ID}, ms
}

// probe asks replica r something any role may ask, with tok.
func probe(ctx context.Context, r *apiclient.Client, tok string) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := r.WithToken(tok).GetNode(pctx, probeNode)
	return err
}

// awaitRefusal asks every replica with tok, each every 5 ms, until each
// refuses it, and returns when each first did (zero: not within limit).
// The polling is the measurement: each answer is the replica's state.
func awaitRefusal(ctx context.Context, reps []*apiclient.Client, tok string, limit time.Duration) []time.Time {
	at := make([]time.Time, len(reps))
	var wg sync.WaitGroup
	for i, r := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			end := time.After(limit)
			for {
				if apiclient.IsStatus(probe(ctx, r, tok), http.StatusUnauthorized) {
					at[i] = time.Now()
					return
				}
				select {
				case <-tick.C:
				case <-end:
					return
				}
			}
		}()
	}
	wg.Wait()
	return at
}

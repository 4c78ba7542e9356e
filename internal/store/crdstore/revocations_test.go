// SPDX-License-Identifier: Apache-2.0

package crdstore

import (
	"strings"
	"testing"
	"time"
)

// TestRevocationsReachEveryReplica: a token revoked through one store (one
// API replica) is on the other's deny list within a second, an old
// base64url id too; revoking twice is no error; and the revocations of
// expired tokens are deleted by the next revocation.
func TestRevocationsReachEveryReplica(t *testing.T) {
	c := cluster(t)
	ctx := ctxT(t)
	ns := c.namespace(t)
	r1, r2 := c.open(t, ns, 0), c.open(t, ns, 0)
	until := time.Now().Add(time.Hour)
	for _, id := range []string{"0a1b2c3d4e5f60718293a4b5", "Old_base64-Id"} {
		if ok, err := r2.TokenRevoked(id); ok || err != nil {
			t.Fatalf("%s revoked before revoking: %v %v", id, ok, err)
		}
		if err := r1.RevokeToken(ctx, id, until, "test"); err != nil {
			t.Fatal(err)
		}
		// RevokeToken returns once its own replica refuses the token.
		revoked := time.Now()
		if ok, _ := r1.TokenRevoked(id); !ok {
			t.Fatalf("%s: the revoking replica does not refuse it", id)
		}
		// The other replica: polled, to measure its watch's delay.
		for ok := false; !ok; {
			var err error
			if ok, err = r2.TokenRevoked(id); err != nil {
				t.Fatal(err)
			}
			if !ok && time.Since(revoked) > time.Second {
				t.Fatalf("%s: not on the other replica's deny list after %s", id, time.Since(revoked))
			}
			time.Sleep(time.Millisecond)
		}
		t.Logf("%s on the other replica's deny list after %s", id, time.Since(revoked))
		if err := r2.RevokeToken(ctx, id, until, "again"); err != nil {
			t.Fatalf("revoke twice: %v", err)
		}
	}
	out := c.kubectl(t, "", "-n", ns, "get", "tokenrevocations", "-o", `jsonpath={range .items[*]}{.metadata.name}={.spec.tokenID}{"\n"}{end}`)
	if !strings.Contains(out, "0a1b2c3d4e5f60718293a4b5=0a1b2c3d4e5f60718293a4b5\n") || !strings.Contains(out, "=Old_base64-Id\n") || !strings.Contains(out, "sha256-") {
		t.Fatalf("objects:\n%s", out)
	}
	// An expired one goes with the next revocation.
	if err := r1.RevokeToken(ctx, "dead", time.Now().Add(-time.Minute), "test"); err != nil {
		t.Fatal(err)
	}
	if err := r2.RevokeToken(ctx, "beef", until, "test"); err != nil {
		t.Fatal(err)
	}
	if out := c.kubectl(t, "", "-n", ns, "get", "tokenrevocation", "dead", "--ignore-not-found", "-o", "name"); out != "" {
		t.Fatalf("the expired revocation is still there: %s", out)
	}
}

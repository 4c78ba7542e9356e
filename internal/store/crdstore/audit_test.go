// SPDX-License-Identifier: Apache-2.0

package crdstore

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
)

// TestAuditAcrossReplicas: an entry appended through one store (one API
// replica) is in the other's history as it was written; the namespace and
// both histories keep only the newest AuditSize entries; pages follow each
// other; and an entry cannot be changed once written.
func TestAuditAcrossReplicas(t *testing.T) {
	c := cluster(t)
	ctx := ctxT(t)
	ns := c.namespace(t)
	const bound = 5
	var rs [2]*Store
	for i := range rs {
		s, err := Open(ctx, Options{Config: c.srv.RESTConfig(), Namespace: ns, AuditSize: bound})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		rs[i] = s
	}
	var written []apitypes.AuditEntry
	for i := range 8 {
		from, other := rs[i%2], rs[(i+1)%2]
		start := time.Now()
		e, err := from.AppendAudit(ctx, apitypes.AuditEntry{Time: time.Now(), Subject: fmt.Sprintf("s%d", i), Role: "admin", Node: "",
			TokenID: "0a1b2c", Operation: apitypes.AuditStrategyCreate, Object: apitypes.AuditObject{Kind: "strategy", Name: "gnb"},
			Outcome: apitypes.AuditRefused, Status: 409, Error: "strategy gnb already exists", Detail: "d", Revision: 7, Server: "replica-a", Source: "10.0.0.1:5555"})
		if err != nil {
			t.Fatal(err)
		}
		written = append(written, e)
		// The other replica: once its watch delivers the entry.
		if err := other.audit.waitFor(ctx, ns, "entry "+e.ID, func() bool {
			got, _, err := other.ListAudit(ctx, apitypes.AuditQuery{Limit: 1})
			return err == nil && len(got) == 1 && got[0] == e
		}); err != nil {
			got, _, _ := other.ListAudit(ctx, apitypes.AuditQuery{Limit: 1})
			t.Fatalf("entry %d: not the other replica's newest: %v\n got %+v\nwant %+v", i, err, got, e)
		}
		t.Logf("entry %d appended and in the other replica's history %s after the call", i, time.Since(start))
	}
	want := ""
	for i := len(written) - 1; i >= len(written)-bound; i-- {
		want += written[i].Subject + ","
	}
	for i, r := range rs {
		all, more, err := r.ListAudit(ctx, apitypes.AuditQuery{})
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, e := range all {
			got += e.Subject + ","
		}
		if got != want || more {
			t.Errorf("replica %d: history %s (more %v), want %s", i, got, more, want)
		}
	}
	// Each append waited for the previous one on both replicas, so pruning
	// left exactly the bound in the namespace.
	names := strings.Fields(c.kubectl(t, "", "-n", ns, "get", "auditentries", "-o", `jsonpath={.items[*].metadata.name}`))
	if len(names) != bound || names[0] != written[len(written)-bound].ID {
		t.Errorf("objects %v, want the %d newest from %s", names, bound, written[len(written)-bound].ID)
	}
	// Pages through the other replica.
	q, pages := apitypes.AuditQuery{Limit: 2}, ""
	for {
		page, more, err := rs[1].ListAudit(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			pages += e.Subject + ","
		}
		if !more {
			break
		}
		pages += "|"
		q.Before = page[len(page)-1].ID
	}
	if pages != "s7,s6,|s5,s4,|s3," {
		t.Errorf("pages %s", pages)
	}
	if got, _, _ := rs[0].ListAudit(ctx, apitypes.AuditQuery{Subject: "s4"}); len(got) != 1 || got[0] != written[4] {
		t.Errorf("subject s4: %+v", got)
	}
	// Written once: an edit is refused by the CRD.
	err := rs[0].auditReq("PATCH").Name(names[0]).SetHeader("Content-Type", "application/merge-patch+json").
		Body([]byte(`{"spec":{"subject":"someone-else"}}`)).Do(ctx).Error()
	if err == nil || !strings.Contains(err.Error(), "not changed once written") {
		t.Errorf("an edit of an entry: %v", err)
	}
}

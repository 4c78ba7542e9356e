// SPDX-License-Identifier: Apache-2.0

package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
)

// subjects lists the entries' subjects, newest first as listed.
func subjects(es []apitypes.AuditEntry) string {
	var out []string
	for _, e := range es {
		out = append(out, e.Subject)
	}
	return strings.Join(out, ",")
}

func appendAudit(t *testing.T, s Store, subject, kind string) apitypes.AuditEntry {
	t.Helper()
	e, err := s.AppendAudit(context.Background(), apitypes.AuditEntry{Time: time.Now().UTC(), Subject: subject, Role: "admin",
		Operation: kind + ".delete", Object: apitypes.AuditObject{Kind: kind, Name: "x"}, Outcome: apitypes.AuditOK, Status: 200})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func listAudit(t *testing.T, s Store, q apitypes.AuditQuery) ([]apitypes.AuditEntry, bool) {
	t.Helper()
	es, more, err := s.ListAudit(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	return es, more
}

// TestAuditHistoryBolt: entries come back newest first with their fields,
// only the newest AuditSize are kept, pages follow each other with Before,
// filters apply, and the history survives a reopen (a smaller bound
// applying at once).
func TestAuditHistoryBolt(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenWith(dir, Options{AuditSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	var last apitypes.AuditEntry
	for i := range 8 {
		kind := map[bool]string{true: "token", false: "strategy"}[i%2 == 1]
		e := appendAudit(t, s, fmt.Sprintf("s%d", i), kind)
		if e.ID <= last.ID {
			t.Fatalf("entry %d: ID %q does not sort after %q", i, e.ID, last.ID)
		}
		last = e
	}
	all, more := listAudit(t, s, apitypes.AuditQuery{})
	if got := subjects(all); got != "s7,s6,s5,s4,s3" || more {
		t.Fatalf("history %s (more %v), want the newest 5: s7,s6,s5,s4,s3", got, more)
	}
	if all[0] != last {
		t.Fatalf("listed %+v\nappended %+v", all[0], last)
	}
	var pages []string
	q := apitypes.AuditQuery{Limit: 2}
	for {
		page, more := listAudit(t, s, q)
		pages = append(pages, subjects(page))
		if !more {
			break
		}
		q.Before = page[len(page)-1].ID
	}
	if got := strings.Join(pages, " | "); got != "s7,s6 | s5,s4 | s3" {
		t.Fatalf("pages %s", got)
	}
	if got, _ := listAudit(t, s, apitypes.AuditQuery{Kind: "token"}); subjects(got) != "s7,s5,s3" {
		t.Fatalf("kind token: %s", subjects(got))
	}
	if got, _ := listAudit(t, s, apitypes.AuditQuery{Subject: "s4", Operation: "strategy.delete"}); subjects(got) != "s4" {
		t.Fatalf("subject s4: %s", subjects(got))
	}
	// A position that is no ID of this store still pages by order.
	if got, _ := listAudit(t, s, apitypes.AuditQuery{Before: all[1].ID + "0"}); subjects(got) != "s6,s5,s4,s3" {
		t.Fatalf("before %s0: %s", all[1].ID, subjects(got))
	}
	s.Close()

	s, err = OpenWith(dir, Options{AuditSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, _ := listAudit(t, s, apitypes.AuditQuery{}); subjects(got) != "s7,s6,s5" {
		t.Fatalf("reopened with a bound of 3: %s", subjects(got))
	}
	appendAudit(t, s, "s8", "node")
	if got, _ := listAudit(t, s, apitypes.AuditQuery{}); subjects(got) != "s8,s7,s6" {
		t.Fatalf("after an append: %s", subjects(got))
	}
}

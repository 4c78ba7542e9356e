// SPDX-License-Identifier: Apache-2.0

package apitypes

import "time"

// Operations of the audit history: what a change did.
const (
	AuditStrategyCreate = "strategy.create"
	AuditStrategyUpdate = "strategy.update"
	AuditStrategyDelete = "strategy.delete"
	AuditTokenIssue     = "token.issue"
	AuditTokenRenew     = "token.renew"
	AuditTokenRevoke    = "token.revoke"
	AuditNodeDelete     = "node.delete"
)

// Outcomes of an audited change.
const (
	AuditOK      = "ok"      // done
	AuditRefused = "refused" // 4xx: the request was refused, nothing changed
	AuditFailed  = "failed"  // 5xx: the server or its store failed
)

// RoleLocal is the role of changes made with direct access to the store
// instead of a token: the command line on the server's machine, the
// server's own config file.
const RoleLocal = "local"

// AuditEntry is one change in the audit history (GET /api/v2/audit).
type AuditEntry struct {
	// ID is assigned by the store: lower-case hex, a later entry's ID sorts
	// after an earlier one's; ?continue= takes the last ID of a page.
	ID   string    `json:"id"`
	Time time.Time `json:"time"`
	// Subject, Role, Node and TokenID are the caller's token's (node for
	// agent tokens only).
	Subject   string      `json:"subject"`
	Role      string      `json:"role"`
	Node      string      `json:"node,omitempty"`
	TokenID   string      `json:"token_id,omitempty"`
	Operation string      `json:"operation"`
	Object    AuditObject `json:"object"`
	// Outcome is ok, refused (4xx) or failed (5xx); Status the HTTP status
	// and Error the message the caller got.
	Outcome string `json:"outcome"`
	Status  int    `json:"status,omitempty"`
	Error   string `json:"error,omitempty"`
	// Detail says more: the new token's role and expiry, the revocation's
	// end, the generation-1 list that made a change.
	Detail string `json:"detail,omitempty"`
	// Revision is the strategy revision a strategy change made.
	Revision uint64 `json:"revision,omitempty"`
	// Server is the API replica that made the change (its host name), and
	// Source the client's address as that replica saw it.
	Server string `json:"server,omitempty"`
	Source string `json:"source,omitempty"`
}

// AuditObject is what a change was made to.
type AuditObject struct {
	// Kind is strategy, token or node.
	Kind string `json:"kind"`
	// Name is the strategy's or node's name, or the token's id.
	Name string `json:"name"`
}

// AuditList is a page of the audit history, newest first.
type AuditList struct {
	Entries []AuditEntry `json:"entries"`
	// Continue, when set, fetches the next (older) page: pass it as
	// ?continue=.
	Continue string `json:"continue,omitempty"`
}

// DefaultAuditSize is how many entries the audit history keeps.
const DefaultAuditSize = 10000

// MaxAuditSize bounds a configured audit history: on the Kubernetes store
// each entry is an object that every API replica holds in memory.
const MaxAuditSize = 100000

// AuditQuery selects a page of the audit history.
type AuditQuery struct {
	// Limit is the page size (at most; <= 0: 100).
	Limit int
	// Before takes only entries whose ID sorts below it: the last ID of
	// the previous page ("": from the newest).
	Before string
	// Filters, each exact; "" matches every entry.
	Subject, Operation, Kind, Name string
}

// Match reports whether e passes q's filters (not Before).
func (q AuditQuery) Match(e AuditEntry) bool {
	return (q.Subject == "" || e.Subject == q.Subject) && (q.Operation == "" || e.Operation == q.Operation) &&
		(q.Kind == "" || e.Object.Kind == q.Kind) && (q.Name == "" || e.Object.Name == q.Name)
}

// Page collects q's page from the entries next yields, newest first (ok
// false: none left): those below Before that match, up to the page size,
// and whether a further one matches.
func (q AuditQuery) Page(next func() (e AuditEntry, ok bool, err error)) ([]AuditEntry, bool, error) {
	out := []AuditEntry{}
	for {
		e, ok, err := next()
		if err != nil || !ok {
			return out, false, err
		}
		if (q.Before != "" && e.ID >= q.Before) || !q.Match(e) {
			continue
		}
		if len(out) == q.PageSize() {
			return out, true, nil
		}
		out = append(out, e)
	}
}

// PageSize is Limit, or the default page when it is unset.
func (q AuditQuery) PageSize() int {
	if q.Limit <= 0 {
		return 100
	}
	return q.Limit
}

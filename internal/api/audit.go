// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
)

// The audit trail. Every call of a route with an audit operation (the
// changes: strategies, tokens, node deletion) ends in a structured log line
// ("audit") and, once the caller is authorised, an entry in the store's
// bounded history (GET /api/v2/audit), refusals and failures included.
// Calls refused before that (no token, a bad one, a role that may not make
// the change) are logged only: they change nothing, and a caller who may
// change nothing must not be able to push real changes out of the bounded
// history. The entry is stored before the response is sent, so a client
// that reads the history after its change finds it there.

// auditRec is what a change request did, filled in by serve and the
// handler for serveAudited to record.
type auditRec struct {
	caller     *auth.Claims // authenticated
	authorized bool         // and allowed: the entry goes to the store
	// subject and role of a caller without a token (the login).
	subject, role string

	op, name, detail string
	revision         uint64
	// entries, when set, replace the single entry of op and name (a
	// generation-1 list changes several strategies).
	entries []apitypes.AuditEntry
	skip    bool // nothing changed (a generation-1 list posted again)
}

type auditKey struct{}

// auditOf is the request's record; a throwaway one outside audited routes,
// so handlers shared with them need no checks.
func auditOf(r *http.Request) *auditRec {
	if a, ok := r.Context().Value(auditKey{}).(*auditRec); ok {
		return a
	}
	return &auditRec{}
}

// auditTimeout bounds storing an entry; the client's disconnect does not
// cut it short.
const auditTimeout = 10 * time.Second

// serveAudited serves a change with its response held back until the
// change is recorded.
func (s *Server) serveAudited(rt route, w http.ResponseWriter, r *http.Request) {
	rec := &auditRec{op: rt.audit, name: r.PathValue("name")}
	r = r.WithContext(context.WithValue(r.Context(), auditKey{}, rec))
	buf := &heldResponse{header: w.Header(), status: http.StatusOK}
	err := s.serve(rt, buf, r)
	if err != nil {
		writeError(buf, err)
	}
	s.record(r, rec, buf.status, err)
	w.WriteHeader(buf.status)
	_, _ = w.Write(buf.body.Bytes())
}

// heldResponse keeps a (small, JSON) response until it is sent.
type heldResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (h *heldResponse) Header() http.Header         { return h.header }
func (h *heldResponse) WriteHeader(code int)        { h.status = code }
func (h *heldResponse) Write(b []byte) (int, error) { return h.body.Write(b) }

// record logs the request's entries and stores them if the caller was
// authorised.
func (s *Server) record(r *http.Request, rec *auditRec, status int, err error) {
	if rec.skip && err == nil {
		return
	}
	base := apitypes.AuditEntry{Time: time.Now().UTC(), Outcome: apitypes.AuditOK, Status: status, Server: s.host, Source: r.RemoteAddr}
	switch {
	case status >= 500:
		base.Outcome = apitypes.AuditFailed
	case status >= 400:
		base.Outcome = apitypes.AuditRefused
	}
	if err != nil {
		var e *apitypes.Error
		if errors.As(err, &e) {
			base.Error = e.Err
		} else {
			base.Error = err.Error()
		}
	}
	keep := rec.authorized
	switch {
	case rec.caller != nil:
		c := rec.caller
		base.Subject, base.Role, base.Node, base.TokenID = c.Subject, string(c.Role), c.Node, c.ID
	case rec.subject != "": // the login, past its password check
		base.Subject, base.Role, keep = rec.subject, rec.role, true
	}
	entries := rec.entries
	if len(entries) == 0 {
		entries = []apitypes.AuditEntry{{Operation: rec.op, Object: apitypes.AuditObject{Name: rec.name}, Detail: rec.detail, Revision: rec.revision}}
	}
	for _, e := range entries {
		e.ID, e.Time, e.Outcome, e.Status, e.Error, e.Server, e.Source = "", base.Time, base.Outcome, base.Status, base.Error, base.Server, base.Source
		e.Subject, e.Role, e.Node, e.TokenID = base.Subject, base.Role, base.Node, base.TokenID
		if e.Object.Kind == "" {
			e.Object.Kind, _, _ = strings.Cut(e.Operation, ".")
		}
		clipAudit(&e)
		s.logAudit(r.Context(), e, keep)
		if !keep {
			continue
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), auditTimeout)
		if _, err := s.o.Store.AppendAudit(ctx, e); err != nil {
			s.met.auditLost.Inc()
			s.o.Log.Error("audit entry not stored in the history: the audit line above is its only record", "operation", e.Operation, "object", e.Object.Name, "err", err)
		}
		cancel()
	}
}

// logAudit writes the entry as one structured line; kept says whether it
// also went to the history.
func (s *Server) logAudit(ctx context.Context, e apitypes.AuditEntry, kept bool) {
	attrs := []any{"operation", e.Operation, "kind", e.Object.Kind, "object", e.Object.Name,
		"subject", e.Subject, "role", e.Role, "outcome", e.Outcome, "status", e.Status}
	for _, kv := range [][2]string{{"node", e.Node}, {"token", e.TokenID}, {"error", e.Error}, {"detail", e.Detail}, {"source", e.Source}} {
		if kv[1] != "" {
			attrs = append(attrs, kv[0], kv[1])
		}
	}
	if e.Revision != 0 {
		attrs = append(attrs, "revision", e.Revision)
	}
	attrs = append(attrs, "kept", kept)
	level := slog.LevelInfo
	if e.Outcome != apitypes.AuditOK {
		level = slog.LevelWarn
	}
	s.o.Log.Log(ctx, level, "audit", attrs...)
}

// clipAudit bounds an entry's free text (the CRD's limits are higher).
func clipAudit(e *apitypes.AuditEntry) {
	for _, f := range []struct {
		v   *string
		max int
	}{{&e.Subject, 256}, {&e.Object.Name, 256}, {&e.Error, 1024}, {&e.Detail, 1024}, {&e.Source, 128}} {
		if utf8.RuneCountInString(*f.v) > f.max {
			*f.v = string([]rune(*f.v)[:f.max-1]) + "…"
		}
	}
}

// EnsureStrategies' entries: the server creating its config file's
// strategies.
func auditDefaults(ctx context.Context, st store.Store, name string, rev uint64) error {
	_, err := st.AppendAudit(ctx, apitypes.AuditEntry{Time: time.Now().UTC(), Subject: "config:default_strategies", Role: apitypes.RoleLocal,
		Operation: apitypes.AuditStrategyCreate, Object: apitypes.AuditObject{Kind: "strategy", Name: name}, Outcome: apitypes.AuditOK,
		Detail: "default_strategies of the server's config file, created at start", Revision: rev})
	return err
}

// The history's query parameters, as /openapi.json documents them.
const (
	auditMaxLimit  = 1000
	auditFilterMax = 256
)

var continuePattern = regexp.MustCompile(`^[0-9a-f]{1,32}$`)

func auditParams() []param {
	filter := func(name, desc string, enum ...string) param {
		sch := map[string]any{"type": "string", "minLength": 1, "maxLength": auditFilterMax}
		if enum != nil {
			sch = map[string]any{"type": "string", "enum": enum}
		}
		return param{name, desc, sch}
	}
	return []param{
		{"limit", "entries per page (default 100)", map[string]any{"type": "integer", "minimum": 1, "maximum": auditMaxLimit, "default": 100}},
		{"continue", "the previous page's continue: the entries older than it", map[string]any{"type": "string", "pattern": continuePattern.String()}},
		filter("subject", "only this caller's changes (the token's subject)"),
		filter("operation", "only this operation", apitypes.AuditStrategyCreate, apitypes.AuditStrategyUpdate, apitypes.AuditStrategyDelete,
			apitypes.AuditTokenIssue, apitypes.AuditTokenRenew, apitypes.AuditTokenRevoke, apitypes.AuditNodeDelete),
		filter("kind", "only changes to this kind of object", "strategy", "token", "node"),
		filter("name", "only changes to the object of this name (a strategy or node name, a token id)"),
	}
}

// auditQuery reads the history's parameters, refusing what the document
// does not allow.
func auditQuery(v url.Values) (apitypes.AuditQuery, error) {
	var q apitypes.AuditQuery
	for _, p := range auditParams() {
		if !v.Has(p.name) {
			continue
		}
		if len(v[p.name]) > 1 {
			return q, errorf(http.StatusBadRequest, p.name, "give "+p.name+" once", "%s: given %d times", p.name, len(v[p.name]))
		}
		val := v.Get(p.name)
		switch p.name {
		case "limit":
			n, err := strconv.Atoi(val)
			if err != nil || n < 1 || n > auditMaxLimit || strings.TrimLeft(val, "0123456789") != "" {
				return q, errorf(http.StatusBadRequest, "limit", fmt.Sprintf("use a whole number from 1 to %d", auditMaxLimit), "limit: %q is not a page size", val)
			}
			q.Limit = n
			continue
		case "continue":
			if !continuePattern.MatchString(val) {
				return q, errorf(http.StatusBadRequest, "continue", "pass the continue value of the previous page as it is", "continue: %q is not a position in the history", val)
			}
			q.Before = val
			continue
		}
		if enum, ok := p.schema["enum"].([]string); ok && !slices.Contains(enum, val) {
			return q, errorf(http.StatusBadRequest, p.name, "use one of "+strings.Join(enum, ", "), "%s: %q is unknown", p.name, val)
		}
		if n := utf8.RuneCountInString(val); n < 1 || n > auditFilterMax {
			return q, errorf(http.StatusBadRequest, p.name, fmt.Sprintf("give 1 to %d characters, or leave %s out", auditFilterMax, p.name), "%s: %d characters", p.name, n)
		}
		switch p.name {
		case "subject":
			q.Subject = val
		case "operation":
			q.Operation = val
		case "kind":
			q.Kind = val
		case "name":
			q.Name = val
		}
	}
	return q, nil
}

func (s *Server) listAudit(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	q, err := auditQuery(r.URL.Query())
	if err != nil {
		return err
	}
	entries, more, err := s.o.Store.ListAudit(r.Context(), q)
	if err != nil {
		return storeError("audit history", err)
	}
	out := apitypes.AuditList{Entries: nonNil(entries)}
	if more && len(entries) > 0 {
		out.Continue = entries[len(entries)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/schema"
	"github.com/swiftlane/swiftlane/internal/store"
)

// decode reads one JSON object strictly and checks it against the rules
// /openapi.json documents (package schema): null, unknown fields (compared
// exactly) and trailing data are refused, then every declared constraint.
// The body size is already bounded by wrap.
func (s *Server) decode(r *http.Request, v any) error {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return decodeError(err, s.o.MaxBody)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return decodeError(err, s.o.MaxBody)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errorf(http.StatusBadRequest, "", "send exactly one JSON object", "unexpected data after the JSON body")
	}
	if err := schema.Strict(doc, reflect.TypeOf(v).Elem()); err != nil {
		return fieldError("", err)
	}
	typed := json.NewDecoder(bytes.NewReader(data))
	typed.DisallowUnknownFields()
	if err := typed.Decode(v); err != nil {
		return decodeError(err, s.o.MaxBody)
	}
	if err := schema.Check(v); err != nil {
		return fieldError("", err)
	}
	return nil
}

func (s *Server) health(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	_, rev, err := s.o.Store.Changes(r.Context(), 0, 1)
	if err != nil && !errors.Is(err, store.ErrCompacted) {
		return errorf(http.StatusServiceUnavailable, "", "see the server log", "store: %v", err)
	}
	writeJSON(w, http.StatusOK, apitypes.Health{Status: "ok", Version: s.o.Version, Revision: rev})
	return nil
}

func (s *Server) openapi(w http.ResponseWriter, _ *http.Request, _ *auth.Claims) error {
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(s.doc)
	return err
}

func (s *Server) login(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	var req apitypes.LoginRequest
	if err := s.decode(r, &req); err != nil {
		var e *apitypes.Error
		if errors.As(err, &e) && e.Field == "public_key" {
			// The reference gave a token to anyone presenting the server's
			// public key, which ships with it: that proves nothing.
			return errorf(http.StatusBadRequest, "public_key",
				`send {"username":"admin","password":"<the credential in <data-dir>/admin.credential>"} here, or mint a token on the server with `+"`swiftlane token create --role admin`",
				"the public-key token flow is not supported: a public key is no secret, so it cannot authenticate anyone")
		}
		return err
	}
	if !s.o.Auth.CheckAdmin(req.Username, req.Password) {
		// One answer for unknown user and wrong password.
		return errorf(http.StatusUnauthorized, "password", "use user admin and the credential printed on the server's first start (also in <data-dir>/admin.credential)", "wrong user name or password")
	}
	a := auditOf(r)
	a.subject, a.role = req.Username, string(auth.Admin)
	return s.issue(w, r, http.StatusOK, req.Username, auth.Admin, "", req.TTLSeconds, s.o.LoginTTL)
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request, c *auth.Claims) error {
	var req apitypes.TokenRequest
	if err := s.decode(r, &req); err != nil {
		return err
	}
	def := s.o.TokenTTL
	if auth.Role(req.Role) == auth.Agent {
		def = s.o.AgentTTL
	}
	subject := req.Subject
	if subject == "" {
		subject = "by:" + c.Subject
	}
	return s.issue(w, r, http.StatusCreated, subject, auth.Role(req.Role), req.Node, req.TTLSeconds, def)
}

// renewToken re-issues the caller's token; wrap has verified it (signature,
// expiry, the deny list), so a revoked or expired token never gets here.
func (s *Server) renewToken(w http.ResponseWriter, r *http.Request, c *auth.Claims) error {
	var req apitypes.RenewRequest
	if err := s.decode(r, &req); err != nil {
		return err
	}
	most := s.o.TokenTTL
	if c.Role == auth.Agent {
		most = s.o.AgentTTL
	}
	ttl := most
	if req.TTLSeconds != 0 {
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	if ttl > most { // well-formed, but more than this server grants: a policy refusal
		return errorf(http.StatusForbidden, "ttl_seconds", fmt.Sprintf("ask for at most %d (an admin mints longer tokens with POST /api/v1/tokens)", int64(most/time.Second)),
			"ttl_seconds: %d is longer than the server's lifetime for %s tokens (%s)", req.TTLSeconds, c.Role, most)
	}
	tok, exp, err := s.o.Auth.Renew(c, ttl)
	if err != nil {
		return fieldFromAuth(err)
	}
	id, _, _ := s.o.Auth.TokenID(tok)
	a := auditOf(r)
	a.name, a.detail = id, fmt.Sprintf("renews token %s; expires %s", c.ID, exp.UTC().Format(time.RFC3339))
	writeJSON(w, http.StatusOK, apitypes.TokenResponse{Success: true, Token: tok, Role: string(c.Role), Node: c.Node, ExpiresAt: exp.UTC(), ID: id})
	return nil
}

func (s *Server) issue(w http.ResponseWriter, r *http.Request, status int, subject string, role auth.Role, node string, ttlSec int64, def time.Duration) error {
	ttl := def
	if ttlSec != 0 {
		ttl = time.Duration(ttlSec) * time.Second
	}
	tok, exp, err := s.o.Auth.Issue(subject, role, node, ttl)
	if err != nil {
		return fieldFromAuth(err)
	}
	id, _, _ := s.o.Auth.TokenID(tok)
	a := auditOf(r)
	a.name, a.detail = id, fmt.Sprintf("a %s token for subject %q", role, subject)
	if node != "" {
		a.detail += " bound to node " + node
	}
	a.detail += "; expires " + exp.UTC().Format(time.RFC3339)
	writeJSON(w, status, apitypes.TokenResponse{Success: true, Token: tok, Role: string(role), Node: node, ExpiresAt: exp.UTC(), ID: id})
	return nil
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request, c *auth.Claims) error {
	var req apitypes.RevokeRequest
	if err := s.decode(r, &req); err != nil {
		return err
	}
	id, exp := req.ID, time.Time{}
	a := auditOf(r)
	a.name = id
	switch {
	case (req.ID == "") == (req.Token == ""):
		return errorf(http.StatusBadRequest, "id", `send {"id": "<jti>"} or {"token": "<the token>"}`, "give exactly one of id and token")
	case req.Token != "":
		var err error
		if id, exp, err = s.o.Auth.TokenID(req.Token); err != nil {
			// Well-formed, but no token of ours: there is nothing to revoke.
			return errorf(http.StatusNotFound, "token", "send a token this server signed, or its id", "%v", err)
		}
		a.name = id
		// A renewed token: its whole chain goes (whoever has this one
		// may have renewed it again).
		if fam, _ := s.o.Auth.TokenFamily(req.Token); fam != "" {
			a.detail = "with the token it renews and their renewals (chain " + fam + "); "
			if _, err := s.o.Auth.Revoke(r.Context(), fam, time.Time{}, c.Subject); err != nil {
				return errorf(http.StatusInternalServerError, "", "see the server log", "%v", err)
			}
		}
	}
	// The store keeps the deny list, so every replica on it refuses the
	// token, not only this one.
	until, err := s.o.Auth.Revoke(r.Context(), id, exp, c.Subject)
	if err != nil {
		return errorf(http.StatusInternalServerError, "", "see the server log", "%v", err)
	}
	a.detail += "on the deny list until " + until.UTC().Format(time.RFC3339)
	writeJSON(w, http.StatusOK, apitypes.Revoked{ID: id, Until: until})
	return nil
}

// fieldFromAuth maps auth's "field: message" errors to API errors.
func fieldFromAuth(err error) *apitypes.Error {
	msg := err.Error()
	field, rest := "", msg
	for _, f := range []string{"role", "node", "ttl"} {
		if r, ok := strings.CutPrefix(msg, f+": "); ok {
			field, rest = f, r
		}
	}
	if field == "ttl" {
		field = "ttl_seconds"
	}
	e := &apitypes.Error{Status: http.StatusBadRequest, Err: field + ": " + rest, Field: field, Hint: "fix " + field}
	if i := strings.Index(rest, ": use "); i >= 0 {
		e.Hint = rest[i+2:]
	}
	return e
}

func (s *Server) listStrategies(w http.ResponseWriter, r *http.Request, c *auth.Claims) error {
	list, rev, err := s.o.Store.ListStrategies(r.Context())
	if err != nil {
		return storeError("strategies", err)
	}
	writeJSON(w, http.StatusOK, apitypes.StrategyList{Strategies: s.views(s.forClaims(r.Context(), c, list)), Revision: rev})
	return nil
}

// view adds the server's warnings to a strategy. Pod selectors and
// namespaces need pod labels, which only agents on Kubernetes have: with
// any other store they are accepted (so generation-1 clients, whose
// strategies all carry selectors, keep working) but flagged, here and in
// the UI, rather than silently matching nothing.
func (s *Server) view(st apitypes.Strategy) apitypes.StrategyView {
	v := apitypes.StrategyView{Strategy: st}
	if s.podLabels {
		return v
	}
	if len(st.Selectors) > 0 {
		v.Warnings = append(v.Warnings, "selectors: this server's store has no pod information, so agents cannot match pod labels and the strategy matches no process: match with command_regex, pid or cgroup_path instead, or run `swiftlane api --store kubernetes` with the Kubernetes agents")
	}
	if len(st.Namespaces) > 0 {
		v.Warnings = append(v.Warnings, "namespaces: this server's store has no pod information, so namespaces restrict nothing here; they apply with `swiftlane api --store kubernetes`")
	}
	return v
}

func (s *Server) views(list []apitypes.Strategy) []apitypes.StrategyView {
	out := make([]apitypes.StrategyView, len(list))
	for i, st := range list {
		out[i] = s.view(st)
	}
	return out
}

// EnsureStrategies creates each strategy no strategy is named like (the
// config file's default_strategies) and returns the names it created;
// existing strategies, edited or not, are left alone.
func EnsureStrategies(ctx context.Context, st store.Store, list []apitypes.Strategy) ([]string, error) {
	var created []string
	for i, s := range list {
		if err := s.Validate(); err != nil {
			return created, fieldError(fmt.Sprintf("default_strategies[%d].", i), err)
		}
		if _, err := st.GetStrategy(ctx, s.Name); err == nil {
			continue
		} else if !errors.Is(err, store.ErrNotFound) {
			return created, err
		}
		out, err := st.CreateStrategy(ctx, s)
		if err != nil && !errors.Is(err, store.ErrExists) {
			return created, fmt.Errorf("default strategy %s: %w", s.Name, err)
		} else if err == nil {
			created = append(created, s.Name)
			if err := auditDefaults(ctx, st, s.Name, out.Revision); err != nil {
				return created, fmt.Errorf("default strategy %s was created, but its audit entry was not stored: %w", s.Name, err)
			}
		}
	}
	return created, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (s *Server) getStrategy(w http.ResponseWriter, r *http.Request, c *auth.Claims) error {
	name := r.PathValue("name")
	st, err := s.o.Store.GetStrategy(r.Context(), name)
	if err != nil {
		return storeError("strategy "+name, err)
	}
	if len(s.forClaims(r.Context(), c, []apitypes.Strategy{st})) == 0 {
		return storeError("strategy "+name, store.ErrNotFound) // not for this agent's node
	}
	writeJSON(w, http.StatusOK, s.view(st))
	return nil
}

// readStrategy decodes and validates a strategy body; the store is not
// touched when this fails.
func (s *Server) readStrategy(r *http.Request, name string) (apitypes.Strategy, error) {
	var st apitypes.Strategy
	if err := s.decode(r, &st); err != nil {
		return st, err
	}
	if name != "" {
		if st.Name == "" {
			st.Name = name
		} else if st.Name != name {
			return st, errorf(http.StatusBadRequest, "name", "leave name out of the body or make it "+name, "name %q in the body differs from %q in the URL", st.Name, name)
		}
	}
	st.Revision, st.CreatedRevision, st.Owner = 0, 0, "" // assigned by the store
	if err := st.Validate(); err != nil {
		return st, fieldError("", err)
	}
	return st, nil
}

func (s *Server) createStrategy(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	st, err := s.readStrategy(r, "")
	a := auditOf(r)
	a.name = st.Name
	if err != nil {
		return err
	}
	t0 := time.Now()
	st, err = s.o.Store.CreateStrategy(r.Context(), st)
	if err != nil {
		return storeError("strategy "+st.Name, err)
	}
	a.revision = st.Revision
	serverTiming(w, "store", time.Since(t0))
	s.hub.notify()
	w.Header().Set("Location", "/api/v1/strategies/"+st.Name)
	writeJSON(w, http.StatusCreated, s.view(st))
	return nil
}

func (s *Server) putStrategy(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	st, err := s.readStrategy(r, r.PathValue("name"))
	if err != nil {
		return err
	}
	status := http.StatusOK
	t0 := time.Now()
	out, err := s.o.Store.UpdateStrategy(r.Context(), st)
	if errors.Is(err, store.ErrNotFound) {
		status = http.StatusCreated
		auditOf(r).op = apitypes.AuditStrategyCreate
		out, err = s.o.Store.CreateStrategy(r.Context(), st)
	}
	if err != nil {
		return storeError("strategy "+st.Name, err)
	}
	auditOf(r).revision = out.Revision
	serverTiming(w, "store", time.Since(t0))
	s.hub.notify()
	writeJSON(w, status, s.view(out))
	return nil
}

// serverTiming reports a stage's duration in the standard Server-Timing
// header (browsers' dev tools show it; bench/control splits propagation
// with it).
func serverTiming(w http.ResponseWriter, stage string, d time.Duration) {
	w.Header().Add("Server-Timing", fmt.Sprintf("%s;dur=%.3f", stage, float64(d.Microseconds())/1000))
}

func (s *Server) deleteStrategy(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	name := r.PathValue("name")
	rev, err := s.o.Store.DeleteStrategy(r.Context(), name)
	if err != nil {
		return storeError("strategy "+name, err)
	}
	auditOf(r).revision = rev
	s.hub.notify()
	writeJSON(w, http.StatusOK, apitypes.Deleted{Name: name, Revision: rev})
	return nil
}

func (s *Server) withHealth(n apitypes.Node) apitypes.Node {
	n.Healthy = n.IsHealthy(time.Now())
	if n.Workloads == nil {
		n.Workloads = []apitypes.Workload{}
	}
	return n
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	nodes, err := s.o.Store.ListNodes(r.Context())
	if err != nil {
		return storeError("nodes", err)
	}
	for i := range nodes {
		nodes[i] = s.withHealth(nodes[i])
	}
	sortNodes(nodes)
	writeJSON(w, http.StatusOK, apitypes.NodeList{Nodes: nonNil(nodes)})
	return nil
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	name := r.PathValue("name")
	n, err := s.o.Store.GetNode(r.Context(), name)
	if err != nil {
		return storeError("node "+name, err)
	}
	writeJSON(w, http.StatusOK, s.withHealth(n))
	return nil
}

func (s *Server) registerNode(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	name := r.PathValue("name")
	if !auth.ValidNodeName(name) {
		return errorf(http.StatusBadRequest, "name", "use lower-case letters, digits, '.', '_' or '-'", "%q is not a node name", name)
	}
	var reg apitypes.Registration // mode and heartbeat_seconds: checked by decode (their rules)
	if err := s.decode(r, &reg); err != nil {
		return err
	}
	n, err := s.o.Store.RegisterNode(r.Context(), name, reg, time.Now())
	if err != nil {
		return storeError("node "+name, err)
	}
	writeJSON(w, http.StatusOK, s.withHealth(n))
	return nil
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	name := r.PathValue("name")
	var hb apitypes.Heartbeat // at most 64 buckets per histogram: checked by decode
	if err := s.decode(r, &hb); err != nil {
		return err
	}
	for i := range hb.Carriers { // one zone whichever store keeps them
		c := &hb.Carriers[i]
		c.Since, c.LastPacket = c.Since.UTC(), c.LastPacket.UTC()
	}
	if _, err := s.o.Store.Heartbeat(r.Context(), name, hb, time.Now()); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return errorf(http.StatusNotFound, "name", "register first with PUT /api/v1/nodes/"+name, "node %s is not registered", name)
		}
		return storeError("node "+name, err)
	}
	_, rev, err := s.o.Store.Changes(r.Context(), 0, 1)
	if err != nil && !errors.Is(err, store.ErrCompacted) {
		return storeError("revision", err)
	}
	writeJSON(w, http.StatusOK, apitypes.HeartbeatReply{Revision: rev})
	return nil
}

func (s *Server) deleteNode(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	name := r.PathValue("name")
	if err := s.o.Store.DeleteNode(r.Context(), name); err != nil {
		return storeError("node "+name, err)
	}
	writeJSON(w, http.StatusOK, apitypes.Deleted{Name: name})
	return nil
}

func (s *Server) workloads(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	name := r.PathValue("name")
	n, err := s.o.Store.GetNode(r.Context(), name)
	if err != nil {
		return storeError("node "+name, err)
	}
	writeJSON(w, http.StatusOK, apitypes.WorkloadList{Node: name, AppliedRevision: n.AppliedRevision, Workloads: nonNil(n.Workloads)})
	return nil
}

func (s *Server) carriers(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	name := r.PathValue("name")
	n, err := s.o.Store.GetNode(r.Context(), name)
	if err != nil {
		return storeError("node "+name, err)
	}
	writeJSON(w, http.StatusOK, apitypes.CarrierList{Node: name, LastHeartbeat: n.LastHeartbeat, Carriers: nonNil(n.Carriers)})
	return nil
}

// SPDX-License-Identifier: Apache-2.0

package api

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// The generation-1 (reference) endpoints. Their strategies carry
// priority: bool; a list POST replaces the whole set.

func gen1Form(list []apitypes.Strategy) []apitypes.Strategy {
	out := make([]apitypes.Strategy, len(list))
	for i, st := range list {
		p := st.EffectiveClass() == strategy.Critical
		st.Priority = &p
		out[i] = st
	}
	return out
}

func (s *Server) gen1List(w http.ResponseWriter, r *http.Request, c *auth.Claims) error {
	list, _, err := s.o.Store.ListStrategies(r.Context())
	if err != nil {
		return storeError("strategies", err)
	}
	writeJSON(w, http.StatusOK, apitypes.Gen1StrategyList{Strategies: gen1Form(s.forClaims(r.Context(), c, list))})
	return nil
}

// gen1Replace replaces the caller's own set: the strategies earlier POSTs
// with the same token subject made. Admin-made strategies and other
// clients' sets are untouched, and all of them apply together, oldest
// first, so a generation-1 operator re-posting its list every second cannot
// erase what an admin made.
func (s *Server) gen1Replace(w http.ResponseWriter, r *http.Request, c *auth.Claims) error {
	var body apitypes.Gen1Strategies
	if err := s.decode(r, &body); err != nil {
		return err
	}
	if body.Strategies == nil {
		return errorf(http.StatusBadRequest, "strategies", `send {"strategies": [...]} (an empty list deletes the strategies your earlier posts made)`, "strategies: missing")
	}
	owner := c.Subject
	auditOf(r).detail = "generation-1 list (POST /api/v1/scheduling/strategies)"
	warnings := []string{}
	seen := map[string]int{}
	list := make([]apitypes.Strategy, len(body.Strategies))
	for i, g := range body.Strategies {
		st := &list[i]
		*st = g.Strategy
		st.ExecutionTime = g.ExecutionTime
		if st.Name == "" {
			st.Name = gen1Name(owner, i)
		}
		st.Revision, st.CreatedRevision, st.Owner = 0, 0, owner
		prefix := fmt.Sprintf("strategies[%d].", i)
		// The reference's own example asks for 20 µs; below the scheduler's
		// floor the slice is raised, not refused, so such clients keep working.
		if t := st.ExecutionTime; t > 0 && t < strategy.MinSliceNs {
			st.ExecutionTime = strategy.MinSliceNs
			warnings = append(warnings, fmt.Sprintf("%sexecution_time: %d ns is below the scheduler's minimum slice; clamped to %d ns", prefix, t, strategy.MinSliceNs))
		}
		if err := st.Validate(); err != nil {
			return fieldError(prefix, err)
		}
		if j, dup := seen[st.Name]; dup {
			// 409: JSON Schema cannot say "names unique"; the list is
			// well-formed but cannot become one set.
			return errorf(http.StatusConflict, prefix+"name", "names must be unique in the list", "%q is already used by strategies[%d]", st.Name, j)
		}
		seen[st.Name] = i
	}
	before, _, err := s.o.Store.ListStrategies(r.Context())
	if err != nil {
		return storeError("strategies", err)
	}
	all, _, err := s.o.Store.ReplaceStrategies(r.Context(), owner, list)
	var owned *store.OwnedError
	if errors.As(err, &owned) {
		return errorf(http.StatusConflict, fmt.Sprintf("strategies[%d].name", owned.Index),
			"give the entry another name (or none: unnamed entries are named "+gen1Name(owner, owned.Index)+"); a list POST replaces only the strategies earlier POSTs with your token made",
			"%v", owned)
	}
	if err != nil {
		return storeError("strategies", err)
	}
	s.hub.notify()
	auditGen1(auditOf(r), owner, before, all)
	for i, st := range list {
		for _, w := range s.view(st).Warnings {
			warnings = append(warnings, fmt.Sprintf("strategies[%d].%s", i, w))
		}
	}
	for _, w := range warnings {
		s.o.Log.Warn("generation-1 strategy adjusted", "owner", owner, "warning", w)
	}
	writeJSON(w, http.StatusOK, apitypes.Gen1Replaced{Strategies: gen1Form(nonNil(all)), Warnings: warnings})
	return nil
}

// gen1Name names an unnamed entry after its position and the client, so
// two clients posting unnamed lists do not claim the same names.
func gen1Name(owner string, i int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(owner) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= 40 {
			break
		}
	}
	slug := strings.Trim(b.String(), "-")
	if slug == "" {
		slug = "strategy"
	}
	return fmt.Sprintf("%s-%d", slug, i)
}

func (s *Server) gen1PostMetrics(w http.ResponseWriter, r *http.Request, c *auth.Claims) error {
	var m apitypes.Gen1Metrics
	if err := s.decode(r, &m); err != nil {
		return err
	}
	node := c.Node
	if c.Role != auth.Agent {
		node = "_" + c.Subject // admins pushing by hand
	}
	s.mu.Lock()
	s.gen1[node] = &m
	s.mu.Unlock()
	_, rev, err := s.o.Store.Changes(r.Context(), 0, 1)
	if err != nil && !errors.Is(err, store.ErrCompacted) {
		return storeError("revision", err)
	}
	writeJSON(w, http.StatusOK, apitypes.HeartbeatReply{Revision: rev})
	return nil
}

func (s *Server) gen1GetMetrics(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	nodes, err := s.o.Store.ListNodes(r.Context())
	if err != nil {
		return storeError("nodes", err)
	}
	byNode := map[string]*apitypes.NodeMetrics{}
	for _, n := range nodes {
		byNode[n.Name] = &apitypes.NodeMetrics{Node: n.Name, Counters: n.Counters}
	}
	s.mu.Lock()
	for node, m := range s.gen1 {
		if byNode[node] == nil {
			byNode[node] = &apitypes.NodeMetrics{Node: node}
		}
		byNode[node].Metrics = m
	}
	s.mu.Unlock()
	out := apitypes.MetricsList{Nodes: []apitypes.NodeMetrics{}}
	for _, nm := range byNode {
		out.Nodes = append(out.Nodes, *nm)
	}
	sort.Slice(out.Nodes, func(i, j int) bool { return out.Nodes[i].Node < out.Nodes[j].Node })
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) gen1PodPIDs(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	nodes, err := s.o.Store.ListNodes(r.Context())
	if err != nil {
		return storeError("nodes", err)
	}
	sortNodes(nodes)
	out := apitypes.PodPIDList{Pods: []apitypes.PodPID{}}
	for _, n := range nodes {
		for _, wl := range n.Workloads {
			out.Pods = append(out.Pods, apitypes.PodPID{Node: n.Name, Workload: wl})
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// auditGen1 records what a list POST changed in the poster's set, one
// entry per strategy; a list posted again unchanged records nothing.
func auditGen1(a *auditRec, owner string, before, after []apitypes.Strategy) {
	detail := a.detail
	old := map[string]uint64{}
	for _, st := range before {
		if st.Owner == owner {
			old[st.Name] = st.Revision
		}
	}
	for _, st := range after {
		if st.Owner != owner {
			continue
		}
		rev, had := old[st.Name]
		delete(old, st.Name)
		op := apitypes.AuditStrategyUpdate
		switch {
		case !had:
			op = apitypes.AuditStrategyCreate
		case rev == st.Revision:
			continue
		}
		a.entries = append(a.entries, apitypes.AuditEntry{Operation: op, Object: apitypes.AuditObject{Name: st.Name}, Detail: detail, Revision: st.Revision})
	}
	gone := make([]string, 0, len(old))
	for name := range old {
		gone = append(gone, name)
	}
	sort.Strings(gone)
	for _, name := range gone {
		a.entries = append(a.entries, apitypes.AuditEntry{Operation: apitypes.AuditStrategyDelete, Object: apitypes.AuditObject{Name: name}, Detail: detail})
	}
	a.skip = len(a.entries) == 0
}

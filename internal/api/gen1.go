// SPDX-License-Identifier: Apache-2.0

package api

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"sort"

	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// The generation-1 (reference) endpoints. Their strategies carry
// priority: bool; a list POST replaces the whole set.

func gen1Form(list []store.Strategy) []store.Strategy {
	out := make([]store.Strategy, len(list))
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
	writeJSON(w, http.StatusOK, Gen1Strategies{Strategies: gen1Form(s.forClaims(r.Context(), c, list))})
	return nil
}

func (s *Server) gen1Replace(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	var body Gen1Strategies
	if err := s.decode(r, &body); err != nil {
		return err
	}
	if body.Strategies == nil {
		return errorf(http.StatusBadRequest, "strategies", `send {"strategies": [...]} (an empty list deletes every strategy)`, "strategies: missing")
	}
	seen := map[string]int{}
	for i := range body.Strategies {
		st := &body.Strategies[i]
		if st.Name == "" {
			st.Name = fmt.Sprintf("strategy-%d", i)
		}
		st.Revision, st.CreatedRevision = 0, 0
		prefix := fmt.Sprintf("strategies[%d].", i)
		if err := st.Validate(); err != nil {
			return fieldError(prefix, err)
		}
		if j, dup := seen[st.Name]; dup {
			return errorf(http.StatusBadRequest, prefix+"name", "names must be unique in the list", "%q is already used by strategies[%d]", st.Name, j)
		}
		seen[st.Name] = i
	}
	list, _, err := s.o.Store.ReplaceStrategies(r.Context(), body.Strategies)
	if err != nil {
		return storeError("strategies", err)
	}
	s.hub.notify()
	writeJSON(w, http.StatusOK, Gen1Strategies{Strategies: gen1Form(nonNil(list))})
	return nil
}

func (s *Server) gen1PostMetrics(w http.ResponseWriter, r *http.Request, c *auth.Claims) error {
	var m Gen1Metrics
	if err := s.decode(r, &m); err != nil {
		return err
	}
	for k, v := range m {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return errorf(http.StatusBadRequest, k, "send finite numbers", "%s is not finite", k)
		}
	}
	node := c.Node
	if c.Role != auth.Agent {
		node = "_" + c.Subject // admins pushing by hand
	}
	s.mu.Lock()
	s.gen1[node] = m
	s.mu.Unlock()
	_, rev, err := s.o.Store.Changes(r.Context(), 0, 1)
	if err != nil && !errors.Is(err, store.ErrCompacted) {
		return storeError("revision", err)
	}
	writeJSON(w, http.StatusOK, HeartbeatReply{Revision: rev})
	return nil
}

func (s *Server) gen1GetMetrics(w http.ResponseWriter, r *http.Request, _ *auth.Claims) error {
	nodes, err := s.o.Store.ListNodes(r.Context())
	if err != nil {
		return storeError("nodes", err)
	}
	byNode := map[string]*NodeMetrics{}
	for _, n := range nodes {
		byNode[n.Name] = &NodeMetrics{Node: n.Name, Counters: n.Counters}
	}
	s.mu.Lock()
	for node, m := range s.gen1 {
		if byNode[node] == nil {
			byNode[node] = &NodeMetrics{Node: node}
		}
		byNode[node].Metrics = m
	}
	s.mu.Unlock()
	out := MetricsList{Nodes: []NodeMetrics{}}
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
	out := PodPIDList{Pods: []PodPID{}}
	for _, n := range nodes {
		for _, wl := range n.Workloads {
			out.Pods = append(out.Pods, PodPID{Node: n.Name, Workload: wl})
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// SPDX-License-Identifier: Apache-2.0

package apitypes

import (
	"fmt"
	"regexp"
	"sort"

	"github.com/swiftlane/swiftlane/internal/schema"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// Strategy is a strategy as the control plane serves it: the scheduler-core
// fields plus what only a cluster needs (namespaces, which nodes it is for)
// and the revisions the store assigns.
type Strategy struct {
	strategy.Strategy
	// Namespaces restricts pod selectors to pods in these namespaces (empty: any).
	Namespaces []string `json:"namespaces,omitempty"`
	// NodeSelector limits the strategy to nodes whose labels all match (empty: every node).
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Revision is the store revision of the last write; set by the store.
	Revision uint64 `json:"revision,omitempty"`
	// CreatedRevision orders strategies: the first one that matches a process
	// wins, so older strategies take precedence. Set by the store.
	CreatedRevision uint64 `json:"created_revision,omitempty"`
	// Owner is the token subject of the generation-1 client whose list POST
	// made the strategy: that client's next POST replaces every strategy it
	// owns and nothing else. Empty for strategies made any other way (the
	// admin's). Set by the server; updates keep it.
	Owner string `json:"owner,omitempty"`
}

// NamespacePattern is a namespace name (a DNS label).
const NamespacePattern = `^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`

var labelRE = regexp.MustCompile(NamespacePattern)

// JSONRules are the field constraints the API enforces and documents.
func (Strategy) JSONRules() schema.Rules {
	ignored := schema.Rule{Ignored: true, Doc: "set by the server; ignored in requests"}
	return schema.Rules{
		"namespaces":       {Items: &schema.Rule{Pattern: NamespacePattern, Doc: "a namespace name (lower-case letters, digits, '-')"}, Doc: "pod namespaces the selectors apply in"},
		"node_selector":    {NoEmptyKey: true, Doc: "node labels that must all match, e.g. {\"zone\": \"a\"}"},
		"revision":         ignored,
		"created_revision": ignored,
		"owner":            ignored,
	}
}

// JSONAllOf: the scheduler-core fields' cross-field rules.
func (s Strategy) JSONAllOf() []map[string]any { return s.Strategy.JSONAllOf() }

// Validate checks a strategy for the API (a name is required there); the
// error is a *strategy.FieldError naming the field.
func (s *Strategy) Validate() error {
	if s.Name == "" {
		return &strategy.FieldError{Field: "name", Msg: "missing: use 1-63 lower-case letters, digits, '.', '_' or '-'"}
	}
	if err := s.Strategy.Validate(); err != nil {
		return err
	}
	for i, ns := range s.Namespaces {
		if !labelRE.MatchString(ns) {
			return &strategy.FieldError{Field: fmt.Sprintf("namespaces[%d]", i), Msg: fmt.Sprintf("%q is not a namespace name: use a DNS label (lower-case letters, digits, '-')", ns)}
		}
	}
	for k := range s.NodeSelector {
		if k == "" {
			return &strategy.FieldError{Field: "node_selector", Msg: "empty label key: use e.g. {\"kubernetes.io/hostname\": \"n1\"}"}
		}
	}
	return nil
}

// ForNode reports whether the strategy applies to a node with these labels.
func (s *Strategy) ForNode(labels map[string]string) bool {
	for k, v := range s.NodeSelector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// SortByPrecedence orders strategies oldest first (ties by name).
func SortByPrecedence(list []Strategy) {
	sort.Slice(list, func(i, j int) bool {
		if list[i].CreatedRevision != list[j].CreatedRevision {
			return list[i].CreatedRevision < list[j].CreatedRevision
		}
		return list[i].Name < list[j].Name
	})
}

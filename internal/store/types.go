// SPDX-License-Identifier: Apache-2.0

package store

import (
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/swiftlane/swiftlane/internal/schema"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// Strategy is a strategy as the control plane keeps it: the scheduler-core
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

// Modes an agent registers with.
var modes = []string{"schedule", "observe"}

// JSONRules are the constraints of a registration.
func (Registration) JSONRules() schema.Rules {
	return schema.Rules{
		"mode":              {Required: true, Enum: modes, Doc: "schedule (sched_ext attached) or observe"},
		"heartbeat_seconds": {Required: true, Min: schema.Int64(1), Max: schema.Int64(3600), Doc: "seconds"},
	}
}

// JSONRules bound a histogram to the 64 log2 buckets a uint64 has.
func (WaitHistogram) JSONRules() schema.Rules {
	return schema.Rules{"buckets": {MaxItems: 64, Doc: "log2 buckets of µs"}}
}

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

// ChangeType says what happened to a strategy.
type ChangeType string

const (
	Put    ChangeType = "put"
	Delete ChangeType = "delete"
)

// Change is one entry of the strategy change log that watches replay.
type Change struct {
	Revision uint64     `json:"revision"`
	Type     ChangeType `json:"type"`
	Name     string     `json:"name"`
	// Strategy is the new value (put only).
	Strategy *Strategy `json:"strategy,omitempty"`
}

// Registration is what an agent says about itself when it (re)starts.
type Registration struct {
	Labels  map[string]string `json:"labels,omitempty"`
	Version string            `json:"version"`
	Kernel  string            `json:"kernel"`
	// Mode is "schedule" (sched_ext attached) or "observe" (resolve and report only).
	Mode string `json:"mode"`
	// Reason explains observe mode (why the scheduler cannot run).
	Reason string `json:"reason,omitempty"`
	// HeartbeatSeconds is the agent's heartbeat period; the node counts as
	// unhealthy after three missed heartbeats.
	HeartbeatSeconds int `json:"heartbeat_seconds"`
}

// Heartbeat is an agent's periodic status.
type Heartbeat struct {
	// SchedulerState is sched_ext's state as the agent sees it, e.g. "enabled".
	SchedulerState string `json:"scheduler_state"`
	// AppliedRevision is the strategy revision the agent has applied.
	AppliedRevision uint64     `json:"applied_revision"`
	Counters        *Counters  `json:"counters,omitempty"`
	Workloads       []Workload `json:"workloads"`
}

// Workload is one process a strategy applies to on a node.
type Workload struct {
	PID       int    `json:"pid"`
	Strategy  string `json:"strategy"`
	Class     string `json:"class"`
	Inherited bool   `json:"inherited,omitempty"`
	Cmdline   string `json:"cmdline"`
	// The pod and container the process runs in, where the agent knows them:
	// the Kubernetes agent knows all four; an agent on a plain host reads the
	// pod UID and container id from the process's cgroup, if it is in a pod.
	PodName     string `json:"pod_name,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	PodUID      string `json:"pod_uid,omitempty"`
	Container   string `json:"container,omitempty"`
	ContainerID string `json:"container_id,omitempty"`
}

// Counters are a node's scheduler counters (totals since the scheduler loaded).
type Counters struct {
	// Enqueued counts enqueues by class name.
	Enqueued map[string]uint64 `json:"enqueued"`
	// Dispatched counts dispatches by path: direct, shared, critical, kthread.
	Dispatched        map[string]uint64 `json:"dispatched"`
	PreemptKicks      uint64            `json:"preempt_kicks"`
	WakeupPreempts    uint64            `json:"wakeup_preempts"`
	CriticalDemoted   uint64            `json:"critical_demoted"`
	StarvationRescues uint64            `json:"starvation_rescues"`
	EventsDropped     uint64            `json:"events_dropped"`
	// RunqueueWait is the run-queue wait histogram by class name.
	RunqueueWait map[string]WaitHistogram `json:"runqueue_wait"`
}

// WaitHistogram counts run-queue waits: Buckets[i] counts waits in
// [2^(i-1), 2^i) µs, bucket 0 those under 1 µs.
type WaitHistogram struct {
	Count   uint64   `json:"count"`
	SumNs   uint64   `json:"sum_ns"`
	Buckets []uint64 `json:"buckets"`
}

// Node is a registered agent and its last reported status.
type Node struct {
	Name string `json:"name"`
	Registration
	Heartbeat
	RegisteredAt  time.Time `json:"registered_at"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	// Healthy is computed when read: a heartbeat within three periods.
	Healthy bool `json:"healthy"`
}

// IsHealthy reports whether the node heartbeated recently enough at now.
func (n *Node) IsHealthy(now time.Time) bool {
	period := time.Duration(max(n.HeartbeatSeconds, 1)) * time.Second
	last := n.LastHeartbeat
	if last.IsZero() {
		last = n.RegisteredAt
	}
	return now.Sub(last) <= 3*period
}

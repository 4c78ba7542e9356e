// SPDX-License-Identifier: Apache-2.0

package apitypes

import (
	"time"

	"github.com/swiftlane/swiftlane/internal/schema"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

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

// Modes an agent registers with.
var modes = []string{"schedule", "observe"}

// JSONRules are the constraints of a registration.
func (Registration) JSONRules() schema.Rules {
	return schema.Rules{
		"mode":              {Required: true, Enum: modes, Doc: "schedule (sched_ext attached) or observe"},
		"heartbeat_seconds": {Required: true, Min: schema.Int64(1), Max: schema.Int64(3600), Doc: "seconds"},
	}
}

// Heartbeat is an agent's periodic status.
type Heartbeat struct {
	// SchedulerState is sched_ext's state as the agent sees it, e.g. "enabled".
	SchedulerState string `json:"scheduler_state"`
	// AppliedRevision is the strategy revision the agent has applied.
	AppliedRevision uint64     `json:"applied_revision"`
	Counters        *Counters  `json:"counters,omitempty"`
	Workloads       []Workload `json:"workloads"`
	// Carriers are the processes automatic mode prioritises (absent when
	// automatic mode is off).
	Carriers []Carrier `json:"carriers,omitempty"`
	// Unmatchable are the strategies the node holds that can match no
	// process there (absent: none), so the fleet's view says what each
	// node's log and /metrics say.
	Unmatchable []Unmatchable `json:"unmatchable,omitempty"`
}

// Unmatchable is a strategy that matches nothing on a node: why, and what
// to do about it.
type Unmatchable struct {
	Strategy string `json:"strategy"`
	// Reason is one of the node's reasons, e.g. selectors_without_pod_source
	// or cgroup_not_found (newer agents may report others).
	Reason string `json:"reason"`
	Fix    string `json:"fix,omitempty"`
}

// Bounds of a node's unmatchable strategies: as many as a node lists
// workloads; a name with its namespace; a reason's word; a sentence.
const (
	MaxUnmatchable       = 256
	MaxUnmatchableName   = 512
	MaxUnmatchableReason = 64
	MaxUnmatchableFix    = 1024
)

// JSONRules: a strategy's name, a reason in the agents' snake_case words.
func (Unmatchable) JSONRules() schema.Rules {
	return schema.Rules{
		"strategy": {Required: true, MinLength: 1, MaxLength: MaxUnmatchableName, Doc: "the strategy's name (namespace/name from the Kubernetes agent)"},
		"reason":   {Required: true, Pattern: `^[a-z][a-z0-9_]*$`, MaxLength: MaxUnmatchableReason, Doc: "why it matches nothing, e.g. selectors_without_pod_source"},
		"fix":      {MaxLength: MaxUnmatchableFix, Doc: "what the operator can do about it"},
	}
}

// UnmatchableOf is what a heartbeat says of the strategies an Applier
// reports as matching nothing (the first MaxUnmatchable; names are
// validated strategy names, reasons and fixes the node's own words).
func UnmatchableOf(us []strategy.Unmatchable) []Unmatchable {
	var out []Unmatchable
	for _, u := range us[:min(len(us), MaxUnmatchable)] {
		out = append(out, Unmatchable{Strategy: u.Strategy, Reason: u.Reason, Fix: u.Fix})
	}
	return out
}

// Carrier is a process automatic mode prioritises because it was seen
// carrying GTP-U packets in its own context (docs/gtp.md).
type Carrier struct {
	PID     int    `json:"pid"`
	Command string `json:"command"`
	Class   string `json:"class"`
	// Function is the traced kernel function it was first seen in.
	Function string `json:"function"`
	// Since is when it was prioritised; LastPacket its last packet, to
	// within the tracer's emit interval (automatic.idle_timeout_ms / 4,
	// at most 1 s).
	Since      time.Time `json:"since"`
	LastPacket time.Time `json:"last_packet"`
	// Packets it carried since the tracer loaded (or since its PID was last
	// a carrier's), and their rate since the agent's previous heartbeat.
	Packets          uint64  `json:"packets"`
	PacketsPerSecond float64 `json:"packets_per_second"`
}

// Bounds of a carrier as the API takes it: Linux's largest PID, a comm
// (15 bytes) with room to spare, a kernel symbol, and a rate no NIC reaches.
const (
	maxPID           = 1 << 22
	MaxCarriers      = 64
	MaxCommandLength = 64
	MaxFunctionLen   = 128
	maxPacketRate    = 1 << 40
)

// JSONRules: a carrier is a real process in a known class.
func (Carrier) JSONRules() schema.Rules {
	return schema.Rules{
		"pid":                {Required: true, Min: schema.Int64(1), Max: schema.Int64(maxPID), Doc: "process id"},
		"command":            {MaxLength: MaxCommandLength, Doc: "the process's comm"},
		"class":              {Required: true, Enum: strategy.ClassNames(), Doc: "the class automatic mode gives carriers"},
		"function":           {MaxLength: MaxFunctionLen, Doc: "a traced kernel function"},
		"packets_per_second": {Min: schema.Int64(0), Max: schema.Int64(maxPacketRate), Doc: "average since the agent's previous heartbeat"},
	}
}

// JSONRules: a node lists a handful of carriers (its gNBs and UPFs).
func (Heartbeat) JSONRules() schema.Rules {
	return schema.Rules{
		"carriers":    {MaxItems: MaxCarriers, Doc: "the processes automatic mode prioritises"},
		"unmatchable": {MaxItems: MaxUnmatchable, Doc: "the strategies that match nothing on the node"},
	}
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

// JSONRules bound a histogram to the 64 log2 buckets a uint64 has.
func (WaitHistogram) JSONRules() schema.Rules {
	return schema.Rules{"buckets": {MaxItems: 64, Doc: "log2 buckets of µs"}}
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

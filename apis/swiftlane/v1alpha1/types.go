// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Class values, as in the scheduler.
const (
	ClassCritical   = "critical"
	ClassHigh       = "high"
	ClassNormal     = "normal"
	ClassBackground = "background"
)

// SchedulingStrategy gives the processes of matching pods a scheduling class
// and time slice on every node whose agent picks it up.
//
// Pods are selected in the strategy's own namespace, so a namespace's users
// cannot prioritise other tenants' pods. Strategies in the agents' system
// namespace (the Helm release namespace) may use namespaceSelector to reach
// pods in other namespaces.
//
// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sst;strategy,categories=swiftlane
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.class`
// +kubebuilder:printcolumn:name="Slice",type=string,JSONPath=`.spec.slice`
// +kubebuilder:printcolumn:name="Pods",type=string,JSONPath=`.spec.podSelector`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type SchedulingStrategy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SchedulingStrategySpec   `json:"spec"`
	Status SchedulingStrategyStatus `json:"status,omitempty"`
}

// SchedulingStrategySpec says which processes and what they get. Every
// matcher that is set must match (podSelector AND commandRegex ...); at
// least one is required.
//
// +kubebuilder:validation:XValidation:rule="has(self.podSelector) || has(self.commandRegex) || has(self.pid) || has(self.cgroupPath)",message="set at least one matcher: podSelector, commandRegex, pid or cgroupPath",fieldPath=".podSelector"
// +kubebuilder:validation:XValidation:rule="!has(self.namespaceSelector) || has(self.podSelector)",message="namespaceSelector needs podSelector (use podSelector: {} for every pod)",fieldPath=".namespaceSelector"
type SchedulingStrategySpec struct {
	// PodSelector selects pods by label; {} selects every pod in scope.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
	// NamespaceSelector widens the pod scope to matching namespaces. Honoured
	// only for strategies in the system namespace; elsewhere it is reported
	// as a condition and ignored.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// NodeSelector limits the strategy to nodes with all these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// CommandRegex (RE2) must match the process's full command line or
	// executable path.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	CommandRegex string `json:"commandRegex,omitempty"`
	// PID selects one process by its host PID (with nodeSelector: on one node).
	// +kubebuilder:validation:Minimum=1
	// +optional
	PID int32 `json:"pid,omitempty"`
	// CgroupPath selects a cgroup v2 directory and everything below it,
	// relative to the cgroup root.
	// +kubebuilder:validation:Pattern=`^/`
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	CgroupPath string `json:"cgroupPath,omitempty"`
	// Class is the scheduling class the matched processes get.
	// +kubebuilder:validation:Enum=critical;high;normal;background
	// +kubebuilder:default=critical
	Class string `json:"class,omitempty"`
	// Slice is the time slice for matched tasks (e.g. "2ms"); unset keeps
	// the scheduler's default.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('50us') && duration(self) <= duration('1s')",message="slice must be between 50us and 1s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=duration
	// +optional
	Slice *metav1.Duration `json:"slice,omitempty"`
	// Inherit extends the class to children the matched processes fork.
	// +optional
	Inherit bool `json:"inherit,omitempty"`
}

// SchedulingStrategyStatus is written by the agents, each its own entry of
// nodes (server-side apply, one field manager per node), so nodes never
// conflict and no agent rewrites another's entry. There is deliberately no
// cluster-wide total: keeping one would make every agent write on every
// other agent's change.
type SchedulingStrategyStatus struct {
	// Nodes is what each node applied (5000: Kubernetes' node limit).
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=5000
	// +optional
	Nodes []StrategyNodeStatus `json:"nodes,omitempty"`
}

// StrategyNodeStatus is one node's view of a strategy.
type StrategyNodeStatus struct {
	// Node is the node's name.
	Node string `json:"node"`
	// ObservedGeneration is the strategy generation the node applied.
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Pods is how many of the node's pods matched.
	Pods int32 `json:"pods"`
	// Processes is how many processes the strategy applies to on the node.
	Processes int32 `json:"processes"`
	// AppliedAt is when the node last changed what it applies.
	AppliedAt metav1.Time `json:"appliedAt,omitempty"`
	// Conditions: Applied (True when the scheduler maps hold the result).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true

// SchedulingStrategyList is a list of SchedulingStrategy.
type SchedulingStrategyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SchedulingStrategy `json:"items"`
}

// SchedulingNode is one node's agent: how it runs and its last heartbeat.
// The agent creates it under the node's name.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=snode,categories=swiftlane
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.status.mode`
// +kubebuilder:printcolumn:name="Scheduler",type=string,JSONPath=`.status.schedulerState`
// +kubebuilder:printcolumn:name="Kernel",type=string,JSONPath=`.status.kernel`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.lastHeartbeat`
type SchedulingNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SchedulingNodeSpec   `json:"spec,omitempty"`
	Status SchedulingNodeStatus `json:"status,omitempty"`
}

// SchedulingNodeSpec is empty: a node is described by its status.
type SchedulingNodeSpec struct{}

// SchedulingNodeStatus mirrors the REST API's node registration and heartbeat.
type SchedulingNodeStatus struct {
	Version string `json:"version,omitempty"`
	Kernel  string `json:"kernel,omitempty"`
	// Mode is "schedule" (sched_ext attached) or "observe" (resolve and report only).
	// +kubebuilder:validation:Enum=schedule;observe
	Mode string `json:"mode,omitempty"`
	// Reason explains observe mode.
	Reason string `json:"reason,omitempty"`
	// Labels are the node's labels as the agent saw them.
	Labels map[string]string `json:"labels,omitempty"`
	// HeartbeatSeconds is the agent's heartbeat period.
	HeartbeatSeconds int32 `json:"heartbeatSeconds,omitempty"`
	// SchedulerState is sched_ext's state, e.g. "enabled".
	SchedulerState string      `json:"schedulerState,omitempty"`
	RegisteredAt   metav1.Time `json:"registeredAt,omitempty"`
	LastHeartbeat  metav1.Time `json:"lastHeartbeat,omitempty"`
	// AppliedRevision is the strategy revision the node applied (REST API agents).
	AppliedRevision int64 `json:"appliedRevision,omitempty"`
	// Workloads are the processes strategies apply to on the node (capped).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Workloads []Workload `json:"workloads,omitempty"`
	// Carriers are the processes automatic mode prioritises because they
	// carry GTP-U packets (capped).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Carriers []Carrier `json:"carriers,omitempty"`
	// Unmatchable are the strategies that can match no process on the node,
	// with the reason and the fix (capped).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +optional
	Unmatchable []UnmatchableStrategy `json:"unmatchable,omitempty"`
}

// UnmatchableStrategy is a strategy that matches nothing on a node.
type UnmatchableStrategy struct {
	// Strategy is its name (namespace/name from the Kubernetes agent).
	// +kubebuilder:validation:MaxLength=512
	Strategy string `json:"strategy"`
	// Reason is why, e.g. selectors_without_pod_source or cgroup_not_found.
	// +kubebuilder:validation:MaxLength=64
	Reason string `json:"reason"`
	// Fix is what the operator can do about it.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Fix string `json:"fix,omitempty"`
}

// Carrier is a process automatic mode prioritises.
type Carrier struct {
	PID int32 `json:"pid"`
	// Command is the process's name (comm).
	// +kubebuilder:validation:MaxLength=64
	Command string `json:"command"`
	// +kubebuilder:validation:Enum=critical;high;normal;background
	Class string `json:"class"`
	// Function is the traced kernel function it was first seen in.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Function string `json:"function,omitempty"`
	// Since is when it was prioritised.
	// +optional
	Since metav1.MicroTime `json:"since,omitempty"`
	// LastPacket is its last GTP-U packet, to within the tracer's emit interval.
	// +optional
	LastPacket metav1.MicroTime `json:"lastPacket,omitempty"`
	// Packets it carried since the tracer loaded (or since its PID was last a carrier's).
	Packets int64 `json:"packets"`
	// PacketsPerSecond is their rate since the agent's previous heartbeat, rounded.
	PacketsPerSecond int64 `json:"packetsPerSecond"`
}

// Workload is one process a strategy applies to.
type Workload struct {
	PID       int32  `json:"pid"`
	Strategy  string `json:"strategy"`
	Class     string `json:"class"`
	Inherited bool   `json:"inherited,omitempty"`
	Cmdline   string `json:"cmdline,omitempty"`
	// Pod is namespace/name when the process belongs to a pod.
	Pod string `json:"pod,omitempty"`
	// PodUID is the pod's metadata.uid.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	PodUID string `json:"podUID,omitempty"`
	// Container is the container's name in the pod, when known.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Container string `json:"container,omitempty"`
	// ContainerID is the runtime's container id (bare, without runtime://).
	// +kubebuilder:validation:MaxLength=128
	// +optional
	ContainerID string `json:"containerID,omitempty"`
}

// +kubebuilder:object:root=true

// SchedulingNodeList is a list of SchedulingNode.
type SchedulingNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SchedulingNode `json:"items"`
}

// AnnotationCreatedRevision orders strategies: the API server sets it on
// create to its store revision, so older strategies take precedence (the
// first strategy matching a process wins). Objects without it (e.g. made
// with kubectl) count as 0; set it by hand to order them explicitly.
const AnnotationCreatedRevision = "swiftlane.io/created-revision"

// AnnotationOwner marks a strategy a generation-1 client made with its list
// POST (the value is the client's token subject): that client's next POST
// replaces the strategies with its mark and no others. Absent on strategies
// made any other way.
const AnnotationOwner = "swiftlane.io/gen1-owner"

// CreatedRevision is the strategy's AnnotationCreatedRevision (0 if absent
// or not a number).
func (s *SchedulingStrategy) CreatedRevision() uint64 {
	n, err := strconv.ParseUint(s.Annotations[AnnotationCreatedRevision], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// Precedes orders strategies the way agents and the API server apply them:
// by created revision, then namespace, then name.
func Precedes(a, b *SchedulingStrategy) bool {
	if ra, rb := a.CreatedRevision(), b.CreatedRevision(); ra != rb {
		return ra < rb
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

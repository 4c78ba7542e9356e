// SPDX-License-Identifier: Apache-2.0

package apitypes

import (
	"time"

	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/schema"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// The request and response envelopes of the endpoints. The server's
// /openapi.json is generated from these types (and the routes that use
// them), so a field added here is documented at once.

// Health is GET /health.
type Health struct {
	Status   string `json:"status"`
	Version  string `json:"version"`
	Revision uint64 `json:"revision"`
}

// LoginRequest exchanges the bootstrap admin credential for a token.
type LoginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
	// TTLSeconds is the token lifetime (default 12 h).
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
}

// ttlRule bounds ttl_seconds: 0 (the default) or auth.MinTTL..auth.MaxTTL.
var ttlRule = schema.Rule{Min: schema.Int64(0), Max: schema.Int64(int64(auth.MaxTTL / time.Second)),
	Exclude: &[2]int64{1, int64(auth.MinTTL/time.Second) - 1}, Doc: "seconds; 0: the default"}

// JSONRules are the login's constraints.
func (LoginRequest) JSONRules() schema.Rules {
	return schema.Rules{"ttl_seconds": ttlRule}
}

// TokenRequest asks for a token (admin only).
type TokenRequest struct {
	Role string `json:"role"`
	// Node binds an agent token to one node.
	Node string `json:"node,omitempty"`
	// TTLSeconds is the lifetime (default: the server's tokens.agent_ttl,
	// 24 h, for agents; tokens.ttl, 12 h, otherwise).
	TTLSeconds int64  `json:"ttl_seconds,omitempty"`
	Subject    string `json:"subject,omitempty"`
}

// JSONRules are a token request's constraints.
func (TokenRequest) JSONRules() schema.Rules {
	return schema.Rules{
		"role":        {Required: true, Enum: []string{string(auth.Admin), string(auth.Viewer), string(auth.Agent)}, Doc: "admin, viewer or agent"},
		"node":        {Pattern: auth.NodePattern, Doc: "the node an agent token is bound to (lower-case letters, digits, '.', '_', '-'); only for role agent"},
		"ttl_seconds": ttlRule,
	}
}

// JSONAllOf: agent tokens need a node, the others none.
func (TokenRequest) JSONAllOf() []map[string]any {
	return []map[string]any{{"anyOf": []any{
		map[string]any{"required": []string{"node"}, "properties": map[string]any{"role": map[string]any{"enum": []string{string(auth.Agent)}}, "node": map[string]any{"minLength": 1}}},
		map[string]any{"properties": map[string]any{"role": map[string]any{"enum": []string{string(auth.Admin), string(auth.Viewer)}}, "node": map[string]any{"maxLength": 0}}},
	}}}
}

// TokenResponse carries a signed token.
type TokenResponse struct {
	// Success is always true (generation-1 clients check it).
	Success   bool      `json:"success"`
	Token     string    `json:"token"`
	Role      string    `json:"role"`
	Node      string    `json:"node,omitempty"`
	ExpiresAt time.Time `json:"expires_at"`
	// ID is the token's id (jti): what POST /api/v1/tokens/revoke takes.
	ID string `json:"id,omitempty"`
}

// RenewRequest asks for a fresh token for the caller's own token: same
// subject, role and node.
type RenewRequest struct {
	// TTLSeconds is the new token's lifetime (default and most: the
	// server's default for the role).
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
}

// JSONRules are a renewal's constraints.
func (RenewRequest) JSONRules() schema.Rules {
	r := ttlRule
	r.Doc = "seconds; 0: the server's lifetime for the role, which is also the most (a longer one is a 403)"
	return schema.Rules{"ttl_seconds": r}
}

// RevokeRequest puts a token on the deny list: by its id, or the token
// itself (its signature is checked, not its expiry).
type RevokeRequest struct {
	ID    string `json:"id,omitempty"`
	Token string `json:"token,omitempty"`
}

// JSONRules: an id is base64url; a token is a JWT.
func (RevokeRequest) JSONRules() schema.Rules {
	return schema.Rules{
		"id":    {Pattern: `^[A-Za-z0-9_-]*$`, MaxLength: 64, Doc: "the token's id (jti), as printed by `swiftlane token create`"},
		"token": {Pattern: `^([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)?$`, MaxLength: 4096, Doc: "the token itself"},
	}
}

// JSONAllOf: exactly one of id and token.
func (RevokeRequest) JSONAllOf() []map[string]any {
	one := func(f, other string) map[string]any {
		return map[string]any{"required": []string{f}, "properties": map[string]any{f: map[string]any{"minLength": 1}, other: map[string]any{"maxLength": 0}}}
	}
	return []map[string]any{{"anyOf": []any{one("id", "token"), one("token", "id")}}}
}

// Revoked answers a revocation.
type Revoked struct {
	ID string `json:"id"`
	// Until is when the entry leaves the deny list (the token's expiry).
	Until time.Time `json:"until"`
}

// StrategyView is a strategy as the API shows it: what is stored, plus
// what the server warns about it.
type StrategyView struct {
	Strategy
	// Warnings say why (part of) the strategy cannot apply where it is
	// stored, e.g. pod selectors on a server without Kubernetes. Computed
	// on every response, never stored.
	Warnings []string `json:"warnings,omitempty"`
}

// StrategyList is every strategy (for an agent: those for its node).
type StrategyList struct {
	Strategies []StrategyView `json:"strategies"`
	Revision   uint64         `json:"revision"`
}

// Deleted answers a DELETE.
type Deleted struct {
	Name     string `json:"name"`
	Revision uint64 `json:"revision,omitempty"`
}

// WatchKeepAliveHeader, on a watch stream's response, is the period (a Go
// duration, e.g. "15s") of the comments the server writes while the stream
// is idle. A client that reads nothing for several periods knows the
// connection is dead even when no FIN or RST ever arrives (a replica's host
// gone, a partition), and reconnects, to another replica if it has one.
const WatchKeepAliveHeader = "Swiftlane-Watch-Keepalive"

// WatchEvent is the data of one server-sent event on the watch stream. The
// SSE event name is the Type and the SSE id the Revision, so a reconnecting
// client resumes with Last-Event-ID (or ?revision=).
type WatchEvent struct {
	// Type is "sync" (the whole list: start over from it), "put" or "delete".
	Type     string `json:"type"`
	Revision uint64 `json:"revision"`
	Name     string `json:"name,omitempty"`
	// Strategy is the new value (put).
	Strategy *Strategy `json:"strategy,omitempty"`
	// Strategies is the whole list (sync).
	Strategies []Strategy `json:"strategies,omitempty"`
}

// NodeList is every registered node.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}

// HeartbeatReply tells the agent the current strategy revision, so it can
// tell whether its watch is behind.
type HeartbeatReply struct {
	Revision uint64 `json:"revision"`
}

// WorkloadList is what strategies resolved to on one node.
type WorkloadList struct {
	Node            string     `json:"node"`
	AppliedRevision uint64     `json:"applied_revision"`
	Workloads       []Workload `json:"workloads"`
}

// CarrierList is what automatic mode prioritises on one node, as of its
// last heartbeat.
type CarrierList struct {
	Node          string    `json:"node"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	Carriers      []Carrier `json:"carriers"`
}

// Gen1Strategies is the generation-1 body of POST /api/v1/scheduling/strategies.
type Gen1Strategies struct {
	Strategies []Gen1Strategy `json:"strategies"`
}

// JSONRules: the list is required (an empty one removes the poster's set).
func (Gen1Strategies) JSONRules() schema.Rules {
	return schema.Rules{"strategies": {Required: true, Doc: "the poster's whole set"}}
}

// Gen1Strategy is a strategy in a generation-1 list: execution_time below
// the minimum slice is raised to it rather than refused.
type Gen1Strategy struct {
	Strategy
	ExecutionTime uint64 `json:"execution_time,omitempty"`
}

// JSONRules: execution_time may be below the minimum (it is clamped).
func (Gen1Strategy) JSONRules() schema.Rules {
	return schema.Rules{"execution_time": {Min: schema.Int64(0), Max: schema.Int64(strategy.MaxSliceNs), Doc: "ns; below 50000 is raised to 50000 (with a warning); 0 keeps the scheduler's slice"}}
}

// JSONAllOf: the strategy's cross-field rules.
func (g Gen1Strategy) JSONAllOf() []map[string]any { return g.Strategy.JSONAllOf() }

// Gen1StrategyList is GET /api/v1/scheduling/strategies.
type Gen1StrategyList struct {
	Strategies []Strategy `json:"strategies"`
}

// Gen1Replaced answers a generation-1 list POST: every strategy (the
// caller's set merged with the others, in precedence order) and what was
// adjusted rather than refused.
type Gen1Replaced struct {
	Strategies []Strategy `json:"strategies"`
	// Warnings name each adjusted field (a slice below the minimum raised
	// to it) and each matcher that cannot apply here (pod selectors on a
	// server without Kubernetes).
	Warnings []string `json:"warnings"`
}

// Gen1Metrics is what a generation-1 scheduler posts: its BPF counters.
type Gen1Metrics struct {
	UserschedLastRunAt uint64 `json:"usersched_last_run_at"`
	NrQueued           uint64 `json:"nr_queued"`
	NrScheduled        uint64 `json:"nr_scheduled"`
	NrRunning          uint64 `json:"nr_running"`
	NrOnlineCPUs       uint64 `json:"nr_online_cpus"`
	NrUserDispatches   uint64 `json:"nr_user_dispatches"`
	NrKernelDispatches uint64 `json:"nr_kernel_dispatches"`
	NrCancelDispatches uint64 `json:"nr_cancel_dispatches"`
	NrBounceDispatches uint64 `json:"nr_bounce_dispatches"`
	NrFailedDispatches uint64 `json:"nr_failed_dispatches"`
	NrSchedCongested   uint64 `json:"nr_sched_congested"`
}

// NodeMetrics is one node's metrics in GET /api/v1/metrics.
type NodeMetrics struct {
	Node     string       `json:"node"`
	Metrics  *Gen1Metrics `json:"metrics,omitempty"`
	Counters *Counters    `json:"counters,omitempty"`
}

// MetricsList is GET /api/v1/metrics.
type MetricsList struct {
	Nodes []NodeMetrics `json:"nodes"`
}

// PodPID is one resolved process in GET /api/v1/pods/pids.
type PodPID struct {
	Node string `json:"node"`
	Workload
}

// PodPIDList is GET /api/v1/pods/pids.
type PodPIDList struct {
	Pods []PodPID `json:"pods"`
}

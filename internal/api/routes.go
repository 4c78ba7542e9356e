// SPDX-License-Identifier: Apache-2.0

package api

import (
	"net/http"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// route is one endpoint. The server's mux and the OpenAPI document are both
// built from the routes table, so they cannot disagree.
type route struct {
	method, path string
	op, summary  string
	// roles may call it; nil means no token needed.
	roles []auth.Role
	// nodeScoped: an agent token may call it only for its own node ({name}).
	nodeScoped bool
	in         any // request body (a zero value), nil for none
	// inRequire are fields of in this route requires beyond its rules, and
	// inDef the name of the request schema that says so.
	inRequire []string
	inDef     string
	// inOmit are fields of in this route's schema leaves out.
	inOmit     []string
	out        any // response body (a zero value)
	status     int // success status (default 200)
	stream     bool
	contentOut string // non-JSON response media type
	query      []param
	// audit is the operation a call records in the audit history (audit.go);
	// "" for routes that change nothing worth recording.
	audit  string
	handle func(s *Server, w http.ResponseWriter, r *http.Request, c *auth.Claims) error
}

type param struct {
	name, desc string
	// schema of the value (nil: a revision, an unsigned integer).
	schema map[string]any
}

var (
	anyRole    = []auth.Role{auth.Admin, auth.Viewer, auth.Agent}
	readers    = []auth.Role{auth.Admin, auth.Viewer}
	adminOnly  = []auth.Role{auth.Admin}
	nodeWriter = []auth.Role{auth.Admin, auth.Agent}
)

func routes() []route {
	return []route{
		{method: "GET", path: "/health", op: "health", summary: "Liveness and the current strategy revision",
			out: apitypes.Health{}, handle: (*Server).health},
		{method: "GET", path: "/openapi.json", op: "openapi", summary: "This document",
			out: map[string]any{}, handle: (*Server).openapi},
		{method: "GET", path: "/metrics", op: "prometheusMetrics", summary: "Prometheus metrics of the server and the nodes' counters",
			roles: readers, out: "", contentOut: "text/plain", handle: (*Server).prometheus},

		{method: "POST", path: "/api/v1/auth/token", op: "login", summary: "Exchange the admin credential for a token (generation-1 path)",
			in: apitypes.LoginRequest{}, out: apitypes.TokenResponse{}, audit: apitypes.AuditTokenIssue, handle: (*Server).login},
		{method: "POST", path: "/api/v1/tokens", op: "createToken", summary: "Mint a token for a role (agent tokens are bound to a node)",
			roles: adminOnly, in: apitypes.TokenRequest{}, out: apitypes.TokenResponse{}, status: http.StatusCreated, audit: apitypes.AuditTokenIssue, handle: (*Server).createToken},
		{method: "POST", path: "/api/v1/tokens/renew", op: "renewToken",
			summary: "A fresh token for the caller's own (same subject, role and node), valid for the role's default lifetime or ttl_seconds up to it; a revoked or expired token is refused (401). Revoking the first token of a chain revokes its renewals",
			roles:   anyRole, in: apitypes.RenewRequest{}, out: apitypes.TokenResponse{}, audit: apitypes.AuditTokenRenew, handle: (*Server).renewToken},
		{method: "POST", path: "/api/v1/tokens/revoke", op: "revokeToken", summary: "Put a token on the deny list (by id or the token itself) until it expires; the list is in the store, so every API replica refuses the token from then on",
			roles: adminOnly, in: apitypes.RevokeRequest{}, out: apitypes.Revoked{}, audit: apitypes.AuditTokenRevoke, handle: (*Server).revokeToken},

		{method: "GET", path: "/api/v1/strategies", op: "listStrategies", summary: "List strategies in precedence order (agents: those for their node)",
			roles: anyRole, out: apitypes.StrategyList{}, handle: (*Server).listStrategies},
		{method: "POST", path: "/api/v1/strategies", op: "createStrategy", summary: "Create a strategy",
			roles: adminOnly, in: apitypes.Strategy{}, inRequire: []string{"name"}, inDef: "StrategyCreateInput", out: apitypes.StrategyView{}, status: http.StatusCreated, audit: apitypes.AuditStrategyCreate, handle: (*Server).createStrategy},
		{method: "GET", path: "/api/v1/strategies/{name}", op: "getStrategy", summary: "Read one strategy",
			roles: anyRole, out: apitypes.StrategyView{}, handle: (*Server).getStrategy},
		{method: "PUT", path: "/api/v1/strategies/{name}", op: "putStrategy",
			summary: "Create or replace a strategy (200 replaced, 201 created). The name is the URL's; a body that repeats it must repeat it exactly",
			roles:   adminOnly, in: apitypes.Strategy{}, inOmit: []string{"name"}, inDef: "StrategyPutInput", out: apitypes.StrategyView{}, audit: apitypes.AuditStrategyUpdate, handle: (*Server).putStrategy},
		{method: "DELETE", path: "/api/v1/strategies/{name}", op: "deleteStrategy", summary: "Delete a strategy",
			roles: adminOnly, out: apitypes.Deleted{}, audit: apitypes.AuditStrategyDelete, handle: (*Server).deleteStrategy},
		{method: "GET", path: "/api/v1/watch/strategies", op: "watchStrategies",
			summary: "Server-sent events: a sync event (the whole list) unless resuming, then every change. Resume with ?revision= or Last-Event-ID",
			roles:   anyRole, out: apitypes.WatchEvent{}, stream: true, contentOut: "text/event-stream",
			query: []param{{"revision", "resume after this revision (0: start with a sync event)", nil}}, handle: (*Server).watch},

		{method: "GET", path: "/api/v1/nodes", op: "listNodes", summary: "Registered nodes with health, state and counters",
			roles: readers, out: apitypes.NodeList{}, handle: (*Server).listNodes},
		{method: "GET", path: "/api/v1/nodes/{name}", op: "getNode", summary: "One node",
			roles: anyRole, nodeScoped: true, out: apitypes.Node{}, handle: (*Server).getNode},
		{method: "PUT", path: "/api/v1/nodes/{name}", op: "registerNode", summary: "Register (or re-register) a node's agent",
			roles: nodeWriter, nodeScoped: true, in: apitypes.Registration{}, out: apitypes.Node{}, handle: (*Server).registerNode},
		{method: "DELETE", path: "/api/v1/nodes/{name}", op: "deleteNode", summary: "Forget a node",
			roles: adminOnly, out: apitypes.Deleted{}, audit: apitypes.AuditNodeDelete, handle: (*Server).deleteNode},
		{method: "POST", path: "/api/v1/nodes/{name}/heartbeat", op: "heartbeat", summary: "An agent's status: scheduler state, counters, resolved workloads, GTP-U carriers",
			roles: nodeWriter, nodeScoped: true, in: apitypes.Heartbeat{}, out: apitypes.HeartbeatReply{}, handle: (*Server).heartbeat},
		{method: "GET", path: "/api/v1/nodes/{name}/workloads", op: "listWorkloads", summary: "Processes the strategies resolved to on a node",
			roles: anyRole, nodeScoped: true, out: apitypes.WorkloadList{}, handle: (*Server).workloads},
		{method: "GET", path: "/api/v1/nodes/{name}/carriers", op: "listCarriers", summary: "Processes automatic mode prioritises on a node (GTP-U carriers), as of its last heartbeat",
			roles: anyRole, nodeScoped: true, out: apitypes.CarrierList{}, handle: (*Server).carriers},

		{method: "GET", path: "/api/v2/audit", op: "listAudit",
			summary: "The audit history, newest first: every change (strategies created, updated, deleted; tokens issued, renewed, revoked; nodes deleted) with who made it with which token, the object and the outcome. Paged: pass the answer's continue to get older entries",
			roles:   adminOnly, out: apitypes.AuditList{}, query: auditParams(), handle: (*Server).listAudit},

		// Generation 1 (the reference API), kept for existing clients.
		{method: "GET", path: "/api/v1/scheduling/strategies", op: "gen1ListStrategies", summary: "Generation 1: list strategies as {strategies: [...]} with priority: bool",
			roles: anyRole, out: apitypes.Gen1StrategyList{}, handle: (*Server).gen1List},
		{method: "POST", path: "/api/v1/scheduling/strategies", op: "gen1ReplaceStrategies",
			summary: "Generation 1: replace the strategies earlier posts with the same token subject made (others are kept); unnamed entries are named <subject>-<index>; slices below 50 µs are raised to it with a warning; a name used twice, or owned by another client or the admin, is a 409",
			roles:   adminOnly, in: apitypes.Gen1Strategies{}, out: apitypes.Gen1Replaced{}, audit: apitypes.AuditStrategyUpdate, handle: (*Server).gen1Replace},
		{method: "POST", path: "/api/v1/metrics", op: "gen1PostMetrics", summary: "Generation 1: a node's scheduler pushes named numbers",
			roles: nodeWriter, in: apitypes.Gen1Metrics{}, out: apitypes.HeartbeatReply{}, handle: (*Server).gen1PostMetrics},
		{method: "GET", path: "/api/v1/metrics", op: "gen1GetMetrics", summary: "Generation 1: metrics by node (pushed numbers and heartbeat counters)",
			roles: readers, out: apitypes.MetricsList{}, handle: (*Server).gen1GetMetrics},
		{method: "GET", path: "/api/v1/pods/pids", op: "gen1PodPIDs", summary: "Generation 1: resolved processes on every node",
			roles: readers, out: apitypes.PodPIDList{}, handle: (*Server).gen1PodPIDs},
	}
}

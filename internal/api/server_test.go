// SPDX-License-Identifier: Apache-2.0

package api

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// sampleBody is a valid body for each operation that takes one.
func sampleBody(op string, i int) string {
	switch op {
	case "login":
		return `{"username":"admin","password":"wrong"}`
	case "createToken":
		return `{"role":"viewer"}`
	case "createStrategy":
		return fmt.Sprintf(`{"name":"m%d","class":"high","command_regex":"x"}`, i)
	case "putStrategy":
		return `{"class":"critical","command_regex":"nr-gnb"}`
	case "registerNode":
		return `{"version":"t","kernel":"6.18","mode":"observe","heartbeat_seconds":5}`
	case "heartbeat":
		return `{"scheduler_state":"disabled","applied_revision":0,"workloads":[]}`
	case "gen1ReplaceStrategies":
		return `{"strategies":[{"name":"s1","priority":true,"command_regex":"nr-gnb"}]}`
	case "gen1PostMetrics":
		return `{"nr_queued":3}`
	}
	return ""
}

// TestAuthMatrix calls every endpoint with every kind of token and checks
// who gets through.
func TestAuthMatrix(t *testing.T) { eachStore(t, testAuthMatrix) }

func testAuthMatrix(t *testing.T, bk backend) {
	ts := startServer(t, t.TempDir(), serverOpt{backend: bk})
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	stranger := auth.New(other)
	forged, _, _ := stranger.Issue("x", auth.Admin, "", time.Hour)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, auth.Claims{Role: auth.Admin, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: "swiftlane", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))}}).SignedString(jwt.UnsafeAllowNoneSignatureType)

	type caller struct {
		name  string
		token string
		role  auth.Role // "" for refused tokens
	}
	callers := []caller{
		{"admin", ts.token(auth.Admin, ""), auth.Admin},
		{"viewer", ts.token(auth.Viewer, ""), auth.Viewer},
		{"agent-n1", ts.token(auth.Agent, "n1"), auth.Agent},
		{"agent-n2", ts.token(auth.Agent, "n2"), auth.Agent},
		{"no token", "", ""},
		{"wrong key", forged, ""},
		{"alg=none", none, ""},
	}
	// The node and strategy the {name} routes address exist.
	admin := ts.client(callers[0].token)
	if _, err := admin.RegisterNode(bg(), "n1", apitypes.Registration{Mode: "observe", HeartbeatSeconds: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateStrategy(bg(), critical("s1", "nr-gnb")); err != nil {
		t.Fatal(err)
	}
	rs := routes()
	// Deletions last, so the other calls find what they address.
	slices.SortStableFunc(rs, func(a, b route) int {
		return boolInt(a.method == "DELETE") - boolInt(b.method == "DELETE")
	})
	for i, rt := range rs {
		path := strings.ReplaceAll(rt.path, "{name}", map[bool]string{true: "n1", false: "s1"}[strings.Contains(rt.path, "/nodes/")])
		for _, c := range callers {
			in := sampleBody(rt.op, i)
			if rt.op == "login" {
				in = fmt.Sprintf(`{"username":"admin","password":%q}`, ts.bootstrap)
			}
			code, body := ts.raw(rt.method, path, c.token, in)
			var want string
			switch {
			case rt.roles == nil:
				want = "through"
			case c.role == "":
				want = "401"
			case !slices.Contains(rt.roles, c.role):
				want = "403"
			case rt.nodeScoped && c.role == auth.Agent && c.name != "agent-n1":
				want = "403"
			default:
				want = "through"
			}
			got := fmt.Sprint(code)
			if code != 401 && code != 403 {
				got = "through"
			}
			if got != want {
				t.Errorf("%s %s as %s: %d %s, want %s", rt.method, path, c.name, code, body, want)
			}
			if code >= 400 {
				var e apitypes.Error
				if json.Unmarshal(body, &e) != nil || e.Err == "" || e.Hint == "" {
					t.Errorf("%s %s as %s: error body %q lacks error/hint", rt.method, path, c.name, body)
				}
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestStrategyCRUD(t *testing.T) { eachStore(t, testStrategyCRUD) }

func testStrategyCRUD(t *testing.T, bk backend) {
	ts := startServer(t, t.TempDir(), serverOpt{backend: bk, tls: true})
	c := ts.client(ts.token(auth.Admin, ""))
	// Revisions are the store's (1, 2, ... in bolt; etcd revisions in
	// Kubernetes): every write's is above the last, and a list is at the
	// last write's.
	s1, err := c.CreateStrategy(bg(), critical("gnb", "nr-gnb|nr-ue"))
	if err != nil || s1.Revision == 0 {
		t.Fatalf("create: %+v %v", s1, err)
	}
	if _, err := c.CreateStrategy(bg(), critical("gnb", "x")); !apiclient.IsStatus(err, http.StatusConflict) {
		t.Fatalf("duplicate: %v", err)
	}
	got, err := c.GetStrategy(bg(), "gnb")
	if err != nil || got.CommandRegex != "nr-gnb|nr-ue" || got.EffectiveClass().String() != "critical" {
		t.Fatalf("get: %+v %v", got, err)
	}
	upd := critical("gnb", "nr-gnb")
	upd.ExecutionTime = 20_000_000
	upd.Selectors = []strategy.Selector{{Key: "app", Value: "gnb"}}
	upd.Namespaces = []string{"free5gc"}
	upd.NodeSelector = map[string]string{"zone": "a"}
	var s2, s3 apitypes.Strategy
	code, body := ts.raw("PUT", "/api/v1/strategies/gnb", ts.token(auth.Admin, ""), mustJSON(upd))
	if code != http.StatusOK || json.Unmarshal(body, &s2) != nil || s2.Revision <= s1.Revision {
		t.Fatalf("put existing (after revision %d): %d %s", s1.Revision, code, body)
	}
	code, body = ts.raw("PUT", "/api/v1/strategies/batch", ts.token(auth.Admin, ""), `{"class":"background","cgroup_path":"/batch.slice"}`)
	if code != http.StatusCreated || json.Unmarshal(body, &s3) != nil || s3.Revision <= s2.Revision {
		t.Fatalf("put new (after revision %d): %d %s", s2.Revision, code, body)
	}
	list, err := c.ListStrategies(bg())
	if err != nil || len(list.Strategies) != 2 || list.Revision != s3.Revision || list.Strategies[0].Name != "gnb" ||
		list.Strategies[0].ExecutionTime != 20_000_000 || list.Strategies[0].NodeSelector["zone"] != "a" ||
		list.Strategies[0].Namespaces[0] != "free5gc" || list.Strategies[0].Selectors[0].Value != "gnb" {
		t.Fatalf("list (want revision %d): %+v %v", s3.Revision, list, err)
	}
	if d, err := c.DeleteStrategy(bg(), "gnb"); err != nil || d.Revision <= list.Revision {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if _, err := c.DeleteStrategy(bg(), "gnb"); !apiclient.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("delete again: %v", err)
	}
	if _, err := c.GetStrategy(bg(), "gnb"); !apiclient.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	// Plain HTTP against the TLS port and an untrusting client both fail.
	if _, err := apiclient.NewClient(ts.url, "", nil).Health(bg()); err == nil {
		t.Fatal("client without the server's certificate connected")
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestRejectedWritesChangeNothing checks every validation error: a 4xx with
// error, field and hint, and the store revision unchanged.
func TestRejectedWritesChangeNothing(t *testing.T) { eachStore(t, testRejectedWritesChangeNothing) }

func testRejectedWritesChangeNothing(t *testing.T, bk backend) {
	ts := startServer(t, t.TempDir(), serverOpt{backend: bk})
	admin := ts.token(auth.Admin, "")
	c := ts.client(admin)
	if _, err := c.CreateStrategy(bg(), critical("keep", "x")); err != nil {
		t.Fatal(err)
	}
	huge := `{"name":"big","class":"high","command_regex":"` + strings.Repeat("a", 70<<10) + `"}`
	cases := []struct {
		method, path, body string
		status             int
		field              string
	}{
		{"POST", "/api/v1/strategies", `{"name":"a","class":"high","command_regex":"("}`, 400, "command_regex"},
		{"POST", "/api/v1/strategies", `{"name":"a","class":"high","command_regex":"x","execution_time":10000}`, 400, "execution_time"},
		{"POST", "/api/v1/strategies", `{"name":"a","class":"high","command_regex":"x","execution_time":2000000000}`, 400, "execution_time"},
		{"POST", "/api/v1/strategies", `{"name":"Bad Name","class":"high","command_regex":"x"}`, 400, "name"},
		{"POST", "/api/v1/strategies", `{"class":"high","command_regex":"x"}`, 400, "name"},
		{"POST", "/api/v1/strategies", `{"name":"a","class":"urgent","command_regex":"x"}`, 400, "class"},
		{"POST", "/api/v1/strategies", `{"name":"a","class":"high"}`, 400, "command_regex"},
		{"POST", "/api/v1/strategies", `{"name":"a","class":"high","command_regex":"x","colour":"red"}`, 400, "colour"},
		{"POST", "/api/v1/strategies", `{"name":"a","class":"high","command_regex":"x","pid":"12"}`, 400, "pid"},
		{"POST", "/api/v1/strategies", `{"name":"a","class":"high","command_regex":"x","namespaces":["Bad_NS"]}`, 400, "namespaces[0]"},
		{"POST", "/api/v1/strategies", `{"name":"a","class":"high","priority":true,"command_regex":"x"}`, 400, "priority"},
		{"POST", "/api/v1/strategies", `{"name":"a","class":"high","command_regex":"x"} {}`, 400, ""},
		{"POST", "/api/v1/strategies", `{"name":"a",`, 400, ""},
		{"POST", "/api/v1/strategies", huge, 413, ""},
		{"POST", "/api/v1/strategies", `{"name":"keep","class":"high","command_regex":"x"}`, 409, "name"},
		{"PUT", "/api/v1/strategies/keep", `{"name":"other","class":"high","command_regex":"x"}`, 400, "name"},
		{"PUT", "/api/v1/strategies/keep", `{"class":"high","command_regex":"x","cgroup_path":"../etc"}`, 400, "cgroup_path"},
		{"POST", "/api/v1/scheduling/strategies", `{"strategies":[{"priority":true,"command_regex":"x"},{"priority":true,"command_regex":"["}]}`, 400, "strategies[1].command_regex"},
		{"POST", "/api/v1/scheduling/strategies", `{}`, 400, "strategies"},
		{"POST", "/api/v1/tokens", `{"role":"agent"}`, 400, "node"},
		{"POST", "/api/v1/tokens", `{"role":"root"}`, 400, "role"},
		{"POST", "/api/v1/tokens", `{"role":"viewer","ttl_seconds":1}`, 400, "ttl_seconds"},
		{"PUT", "/api/v1/nodes/n1", `{"mode":"fast","heartbeat_seconds":5}`, 400, "mode"},
		{"PUT", "/api/v1/nodes/N_1", `{"mode":"observe","heartbeat_seconds":5}`, 400, "name"},
		{"POST", "/api/v1/nodes/n9/heartbeat", `{"workloads":[]}`, 404, "name"},
		{"POST", "/api/v1/nodes/n9/heartbeat", `{"workloads":[],"carriers":[{"pid":7,"class":"critical","packets_per_second":-1}]}`, 400, "carriers[0].packets_per_second"},
		{"POST", "/api/v1/nodes/n9/heartbeat", `{"workloads":[],"carriers":[{"pid":7,"class":"fast"}]}`, 400, "carriers[0].class"},
		{"POST", "/api/v1/nodes/n9/heartbeat", `{"workloads":[],"unmatchable":[{"strategy":"pods","reason":"No Pods!"}]}`, 400, "unmatchable[0].reason"},
		{"POST", "/api/v1/nodes/n9/heartbeat", `{"workloads":[],"unmatchable":[{"strategy":"","reason":"cgroup_not_found"}]}`, 400, "unmatchable[0].strategy"},
		{"POST", "/api/v1/nodes/n9/heartbeat", `{"workloads":[],"carriers":[` + strings.Repeat(`{"pid":7,"class":"critical"},`, 64) + `{"pid":7,"class":"critical"}]}`, 400, "carriers"},
	}
	before, _ := c.ListStrategies(bg())
	for _, tc := range cases {
		code, body := ts.raw(tc.method, tc.path, admin, tc.body)
		var e apitypes.Error
		if err := json.Unmarshal(body, &e); err != nil {
			t.Errorf("%s %s %.60s: body %q is not an error object", tc.method, tc.path, tc.body, body)
			continue
		}
		if code != tc.status || e.Field != tc.field || e.Err == "" || e.Hint == "" {
			t.Errorf("%s %s %.60s: %d %+v, want %d field %q with error and hint", tc.method, tc.path, tc.body, code, e, tc.status, tc.field)
		}
		after, _ := c.ListStrategies(bg())
		if after.Revision != before.Revision || mustJSON(after) != mustJSON(before) {
			t.Errorf("%s %s %.60s: store changed on a rejected write", tc.method, tc.path, tc.body)
		}
	}
	if _, err := c.ListNodes(bg()); err != nil {
		t.Fatal(err)
	}
	// Wrong methods and unknown paths are JSON errors too.
	if code, body := ts.raw("PATCH", "/api/v1/strategies", admin, ""); code != 405 || !strings.Contains(string(body), `"hint"`) {
		t.Errorf("PATCH: %d %s", code, body)
	}
	if code, body := ts.raw("GET", "/api/v1/nope", admin, ""); code != 404 || !strings.Contains(string(body), `"hint"`) {
		t.Errorf("unknown path: %d %s", code, body)
	}
}

func TestRestartLosesNothing(t *testing.T) { eachStore(t, testRestartLosesNothing) }

func testRestartLosesNothing(t *testing.T, bk backend) {
	dir := t.TempDir()
	ts := startServer(t, dir, serverOpt{backend: bk, tls: true})
	if ts.bootstrap == "" {
		t.Fatal("no bootstrap credential on first start")
	}
	c := ts.client("")
	login, err := c.Login(bg(), "admin", ts.bootstrap)
	if err != nil || !login.Success || login.Role != "admin" {
		t.Fatalf("login: %+v %v", login, err)
	}
	c = ts.client(login.Token)
	agentTok, err := c.CreateToken(bg(), apitypes.TokenRequest{Role: "agent", Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := c.CreateStrategy(bg(), critical(fmt.Sprintf("s%d", i), "x")); err != nil {
			t.Fatal(err)
		}
	}
	ag := ts.client(agentTok.Token)
	if _, err := ag.RegisterNode(bg(), "n1", apitypes.Registration{Mode: "observe", HeartbeatSeconds: 5, Kernel: "k"}); err != nil {
		t.Fatal(err)
	}
	seen := time.Date(2026, 11, 26, 10, 0, 0, 123456000, time.UTC) // to the µs, as both stores keep it
	if _, err := ag.Heartbeat(bg(), "n1", apitypes.Heartbeat{AppliedRevision: 5, Workloads: []apitypes.Workload{{PID: 1, Strategy: "s0", Class: "critical", Cmdline: "init"}},
		Carriers:    []apitypes.Carrier{{PID: 77, Command: "nr-gnb", Class: "critical", Function: "gtp_encap_recv", Since: seen, LastPacket: seen.Add(time.Minute), Packets: 9000, PacketsPerSecond: 150}},
		Unmatchable: []apitypes.Unmatchable{{Strategy: "pods", Reason: "selectors_without_pod_source", Fix: "match with command_regex"}}}); err != nil {
		t.Fatal(err)
	}
	before, _ := c.ListStrategies(bg())
	ts.stop()

	ts2 := startServer(t, dir, serverOpt{backend: bk, tls: true, addr: ts.addr})
	if ts2.bootstrap != "" {
		t.Fatal("bootstrap credential printed again on restart")
	}
	c2 := ts2.client(login.Token) // tokens survive the restart
	// The strategies are the same, each at its revision. A Kubernetes
	// store restarts its change log at the list's (etcd's current) revision.
	after, err := c2.ListStrategies(bg())
	if err != nil || mustJSON(after.Strategies) != mustJSON(before.Strategies) || after.Revision < before.Revision {
		t.Fatalf("strategies after restart: %+v %v\nbefore: %+v", after, err, before)
	}
	wl, err := ts2.client(agentTok.Token).Workloads(bg(), "n1")
	if err != nil || len(wl.Workloads) != 1 || wl.AppliedRevision != 5 {
		t.Fatalf("workloads after restart: %+v %v", wl, err)
	}
	cl, err := ts2.client(agentTok.Token).Carriers(bg(), "n1")
	if err != nil || len(cl.Carriers) != 1 || cl.Node != "n1" {
		t.Fatalf("carriers after restart: %+v %v", cl, err)
	}
	if got := cl.Carriers[0]; got.PID != 77 || got.Command != "nr-gnb" || got.Packets != 9000 || got.PacketsPerSecond != 150 ||
		!got.Since.Equal(seen) || !got.LastPacket.Equal(seen.Add(time.Minute)) {
		t.Fatalf("carrier after restart: %+v", got)
	}
	if n, err := ts2.client(agentTok.Token).GetNode(bg(), "n1"); err != nil || len(n.Unmatchable) != 1 ||
		n.Unmatchable[0] != (apitypes.Unmatchable{Strategy: "pods", Reason: "selectors_without_pod_source", Fix: "match with command_regex"}) {
		t.Fatalf("unmatchable strategies after restart: %+v %v", n.Unmatchable, err)
	}
	if _, err := ts2.client("").Login(bg(), "admin", ts.bootstrap); err != nil {
		t.Fatalf("credential after restart: %v", err)
	}
}

func TestAgentSeesOnlyItsNode(t *testing.T) { eachStore(t, testAgentSeesOnlyItsNode) }

func testAgentSeesOnlyItsNode(t *testing.T, bk backend) {
	ts := startServer(t, t.TempDir(), serverOpt{backend: bk})
	admin := ts.client(ts.token(auth.Admin, ""))
	ag := ts.client(ts.token(auth.Agent, "n1"))
	if _, err := ag.RegisterNode(bg(), "n1", apitypes.Registration{Mode: "observe", HeartbeatSeconds: 5, Labels: map[string]string{"zone": "a"}}); err != nil {
		t.Fatal(err)
	}
	a := critical("for-a", "x")
	a.NodeSelector = map[string]string{"zone": "a"}
	b := critical("for-b", "y")
	b.NodeSelector = map[string]string{"zone": "b"}
	for _, s := range []apitypes.Strategy{a, b, critical("all", "z")} {
		if _, err := admin.CreateStrategy(bg(), s); err != nil {
			t.Fatal(err)
		}
	}
	l, err := ag.ListStrategies(bg())
	if err != nil || len(l.Strategies) != 2 || l.Strategies[0].Name != "for-a" || l.Strategies[1].Name != "all" {
		t.Fatalf("agent list: %+v %v", l, err)
	}
	if _, err := ag.GetStrategy(bg(), "for-b"); !apiclient.IsStatus(err, http.StatusNotFound) {
		t.Fatalf("agent get of another node's strategy: %v", err)
	}
	if _, err := ag.Heartbeat(bg(), "n2", apitypes.Heartbeat{}); !apiclient.IsStatus(err, http.StatusForbidden) {
		t.Fatalf("agent heartbeat for another node: %v", err)
	}
	if _, err := ag.CreateStrategy(bg(), critical("evil", "x")); !apiclient.IsStatus(err, http.StatusForbidden) {
		t.Fatalf("agent write: %v", err)
	}
	n, err := admin.GetNode(bg(), "n1")
	if err != nil || !n.Healthy || n.Labels["zone"] != "a" {
		t.Fatalf("node: %+v %v", n, err)
	}
}

// TestGeneration1 drives the reference API's endpoints with its JSON.
func TestGeneration1(t *testing.T) { eachStore(t, testGeneration1) }

func testGeneration1(t *testing.T, bk backend) {
	ts := startServer(t, t.TempDir(), serverOpt{backend: bk})
	code, body := ts.raw("GET", "/health", "", "")
	if code != 200 || !strings.Contains(string(body), `"status":"ok"`) {
		t.Fatalf("health: %d %s", code, body)
	}
	code, body = ts.raw("POST", "/api/v1/auth/token", "", fmt.Sprintf(`{"username":"admin","password":%q}`, ts.bootstrap))
	var tok apitypes.TokenResponse
	if code != 200 || json.Unmarshal(body, &tok) != nil || tok.Token == "" || !tok.Success {
		t.Fatalf("token: %d %s", code, body)
	}
	gen1 := `{"strategies":[{"priority":true,"execution_time":20000000,"selectors":[{"key":"app","value":"ueransim-macvlan"}],"command_regex":"nr-gnb|nr-ue|ping"},{"priority":false,"pid":4242}]}`
	code, body = ts.raw("POST", "/api/v1/scheduling/strategies", tok.Token, gen1)
	if code != 200 {
		t.Fatalf("gen1 post: %d %s", code, body)
	}
	code, body = ts.raw("GET", "/api/v1/scheduling/strategies", tok.Token, "")
	var got struct {
		Strategies []map[string]any `json:"strategies"`
	}
	if code != 200 || json.Unmarshal(body, &got) != nil || len(got.Strategies) != 2 {
		t.Fatalf("gen1 get: %d %s", code, body)
	}
	if got.Strategies[0]["priority"] != true || got.Strategies[0]["execution_time"] != 2e7 || got.Strategies[1]["priority"] != false ||
		got.Strategies[0]["command_regex"] != "nr-gnb|nr-ue|ping" || got.Strategies[1]["pid"] != 4242.0 {
		t.Fatalf("gen1 get: %s", body)
	}
	// The same strategies through the current API: named, with classes.
	l, err := ts.client(tok.Token).ListStrategies(bg())
	if err != nil || l.Strategies[0].Name != "admin-0" || l.Strategies[0].Owner != "admin" || l.Strategies[0].EffectiveClass().String() != "critical" ||
		l.Strategies[1].EffectiveClass().String() != "normal" {
		t.Fatalf("v2 view: %+v %v", l, err)
	}
	// Posting the same list again changes nothing.
	rev := l.Revision
	ts.raw("POST", "/api/v1/scheduling/strategies", tok.Token, gen1)
	if l2, _ := ts.client(tok.Token).ListStrategies(bg()); l2.Revision != rev {
		t.Fatalf("idempotent gen1 post bumped the revision %d -> %d", rev, l2.Revision)
	}
	agent := ts.token(auth.Agent, "n1")
	if code, body := ts.raw("POST", "/api/v1/metrics", agent, `{"nr_queued":3,"nr_scheduled":7}`); code != 200 {
		t.Fatalf("gen1 metrics post: %d %s", code, body)
	}
	code, body = ts.raw("GET", "/api/v1/metrics", tok.Token, "")
	if code != 200 || !strings.Contains(string(body), `"nr_scheduled":7`) {
		t.Fatalf("gen1 metrics get: %d %s", code, body)
	}
	code, body = ts.raw("GET", "/api/v1/pods/pids", tok.Token, "")
	if code != 200 || !strings.Contains(string(body), `"pods":[]`) {
		t.Fatalf("pods/pids: %d %s", code, body)
	}
	// The public-key flow is refused with the one that works.
	code, body = ts.raw("POST", "/api/v1/auth/token", "", `{"public_key":"-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----"}`)
	var e apitypes.Error
	if code != 400 || json.Unmarshal(body, &e) != nil || e.Field != "public_key" || !strings.Contains(e.Hint, `"username":"admin"`) {
		t.Fatalf("public-key flow: %d %s", code, body)
	}
	// A second generation-1 client and an admin strategy: each list POST
	// replaces only its poster's set.
	admin := ts.client(tok.Token)
	if _, err := admin.CreateStrategy(bg(), critical("by-hand", "upf")); err != nil {
		t.Fatal(err)
	}
	other, _, _ := ts.auth.Issue("operator-b", auth.Admin, "", time.Hour)
	if code, body := ts.raw("POST", "/api/v1/scheduling/strategies", other, `{"strategies":[{"priority":true,"command_regex":"iperf"}]}`); code != 200 {
		t.Fatalf("second client: %d %s", code, body)
	}
	// A name another owner has is a 409 naming the entry; nothing changes.
	before, _ := admin.ListStrategies(bg())
	code, body = ts.raw("POST", "/api/v1/scheduling/strategies", other, `{"strategies":[{"priority":true,"command_regex":"iperf"},{"name":"by-hand","priority":true,"command_regex":"x"}]}`)
	if code != 409 || json.Unmarshal(body, &e) != nil || e.Field != "strategies[1].name" {
		t.Fatalf("taking another owner's name: %d %s", code, body)
	}
	if after, _ := admin.ListStrategies(bg()); after.Revision != before.Revision || len(after.Strategies) != 4 {
		t.Fatalf("refused post changed the store: %+v", after)
	}
	// A gen-2 update of a client's strategy keeps it in that client's set.
	upd := critical("operator-b-0", "iperf3")
	if _, err := admin.PutStrategy(bg(), upd); err != nil {
		t.Fatal(err)
	}
	// Deleting the first client's set the generation-1 way leaves the rest.
	code, body = ts.raw("POST", "/api/v1/scheduling/strategies", tok.Token, `{"strategies":[]}`)
	var rep apitypes.Gen1Replaced
	if code != 200 || json.Unmarshal(body, &rep) != nil || len(rep.Strategies) != 2 ||
		rep.Strategies[0].Name != "by-hand" || rep.Strategies[1].Name != "operator-b-0" || rep.Strategies[1].Owner != "operator-b" {
		t.Fatalf("gen1 empty post: %d %s", code, body)
	}
}

func TestPrometheusMetrics(t *testing.T) { eachStore(t, testPrometheusMetrics) }

func testPrometheusMetrics(t *testing.T, bk backend) {
	ts := startServer(t, t.TempDir(), serverOpt{backend: bk})
	ag := ts.client(ts.token(auth.Agent, "n1"))
	if _, err := ag.RegisterNode(bg(), "n1", apitypes.Registration{Mode: "schedule", HeartbeatSeconds: 5}); err != nil {
		t.Fatal(err)
	}
	hb := apitypes.Heartbeat{Counters: &apitypes.Counters{
		Enqueued:     map[string]uint64{"critical": 5},
		RunqueueWait: map[string]apitypes.WaitHistogram{"critical": {Count: 3, SumNs: 3000, Buckets: []uint64{1, 2}}},
	}, Unmatchable: []apitypes.Unmatchable{{Strategy: "batch", Reason: "cgroup_not_found"}, {Strategy: "batch", Reason: "cgroup_not_found", Fix: "twice"}}}
	if _, err := ag.Heartbeat(bg(), "n1", hb); err != nil {
		t.Fatal(err)
	}
	code, body := ts.raw("GET", "/metrics", ts.token(auth.Viewer, ""), "")
	for _, want := range []string{`swiftlane_node_healthy{mode="schedule",node="n1"} 1`, `swiftlane_node_enqueued_total{class="critical",node="n1"} 5`,
		`swiftlane_node_runqueue_wait_seconds_bucket{class="critical",node="n1",le="2e-06"} 3`, `swiftlane_api_requests_total{code="200",op="heartbeat"} 1`,
		`swiftlane_node_strategies_unmatchable{node="n1",reason="cgroup_not_found",strategy="batch"} 1`} {
		if code != 200 || !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
}

// TestSelectorsWithoutPodsWarn: a strategy with pod selectors is stored
// either way; where agents know no pods (the bolt store) every response
// that shows it says it matches nothing, naming the field; on Kubernetes
// there is no warning.
func TestSelectorsWithoutPodsWarn(t *testing.T) { eachStore(t, testSelectorsWithoutPodsWarn) }

func testSelectorsWithoutPodsWarn(t *testing.T, bk backend) {
	ts := startServer(t, t.TempDir(), serverOpt{backend: bk})
	tok := ts.token(auth.Admin, "")
	admin := ts.client(tok)
	wantWarn := bk.name == "bolt"
	check := func(what string, warnings []string) {
		t.Helper()
		got := len(warnings) > 0 && strings.HasPrefix(warnings[0], "selectors: ") && strings.Contains(warnings[0], "matches no process")
		if got != wantWarn || (!wantWarn && len(warnings) > 0) {
			t.Errorf("%s: warnings %q (want a selectors warning: %v)", what, warnings, wantWarn)
		}
	}
	st := critical("by-label", "nr-gnb")
	st.Selectors = []strategy.Selector{{Key: "app", Value: "ueransim"}}
	created, err := admin.CreateStrategy(bg(), st)
	if err != nil {
		t.Fatal(err)
	}
	check("create", created.Warnings)
	put, err := admin.PutStrategy(bg(), st)
	if err != nil {
		t.Fatal(err)
	}
	check("put", put.Warnings)
	got, err := admin.GetStrategy(bg(), "by-label")
	if err != nil || len(got.Selectors) != 1 {
		t.Fatalf("stored: %+v %v", got, err)
	}
	check("get", got.Warnings)
	l, err := admin.ListStrategies(bg())
	if err != nil || len(l.Strategies) != 1 {
		t.Fatal(err)
	}
	check("list", l.Strategies[0].Warnings)
	// Without selectors, no warning anywhere.
	plain, err := admin.CreateStrategy(bg(), critical("plain", "upf"))
	if err != nil || len(plain.Warnings) != 0 {
		t.Fatalf("plain strategy: %+v %v", plain, err)
	}
	// Generation 1: the warning names the entry.
	code, body := ts.raw("POST", "/api/v1/scheduling/strategies", tok, `{"strategies":[{"priority":true,"command_regex":"x","selectors":[{"key":"app","value":"ueransim-macvlan"}]}]}`)
	var rep apitypes.Gen1Replaced
	if code != 200 || json.Unmarshal(body, &rep) != nil {
		t.Fatalf("gen1 post: %d %s", code, body)
	}
	if has := len(rep.Warnings) == 1 && strings.HasPrefix(rep.Warnings[0], "strategies[0].selectors: "); has != wantWarn {
		t.Errorf("gen1 warnings %q (want one: %v)", rep.Warnings, wantWarn)
	}
}

// TestTokenRevocation: a revoked token is refused from the next request on,
// revoked through the API (by id or by the token) or written into the store
// by another process (`swiftlane token revoke --store`), without a
// restart; other tokens keep working. The deny list is in the store: a
// server restarted on it still refuses them.
func TestTokenRevocation(t *testing.T) {
	eachStore(t, func(t *testing.T, b backend) {
		dir := t.TempDir()
		ts := startServer(t, dir, serverOpt{backend: b})
		admin := ts.client(ts.token(auth.Admin, ""))
		mint := func(role auth.Role, node string) apitypes.TokenResponse {
			t.Helper()
			tr, err := admin.CreateToken(bg(), apitypes.TokenRequest{Role: string(role), Node: node})
			if err != nil || tr.ID == "" {
				t.Fatalf("mint: %+v %v", tr, err)
			}
			return tr
		}
		works := func(ts *testServer, tok string) error {
			_, err := ts.client(tok).ListStrategies(bg())
			return err
		}
		byID, byToken, byStore, other := mint(auth.Viewer, ""), mint(auth.Agent, "n1"), mint(auth.Viewer, ""), mint(auth.Viewer, "")
		for _, tr := range []apitypes.TokenResponse{byID, byToken, byStore, other} {
			if err := works(ts, tr.Token); err != nil {
				t.Fatalf("fresh token refused: %v", err)
			}
		}
		if _, err := admin.RevokeToken(bg(), apitypes.RevokeRequest{ID: byID.ID}); err != nil {
			t.Fatal(err)
		}
		rv, err := admin.RevokeToken(bg(), apitypes.RevokeRequest{Token: byToken.Token})
		if err != nil || rv.ID != byToken.ID || !rv.Until.Equal(byToken.ExpiresAt) {
			t.Fatalf("revoke by token: %+v %v", rv, err)
		}
		// Revoking again is no error.
		if _, err := admin.RevokeToken(bg(), apitypes.RevokeRequest{ID: byID.ID}); err != nil {
			t.Fatalf("revoke twice: %v", err)
		}
		// What the CLI does without --server: write the store.
		if _, err := auth.Revoke(bg(), ts.store, byStore.ID, byStore.ExpiresAt, "cli", time.Now()); err != nil {
			t.Fatal(err)
		}
		refused := func(ts *testServer) {
			t.Helper()
			for _, tr := range []apitypes.TokenResponse{byID, byToken, byStore} {
				err := works(ts, tr.Token)
				var e *apitypes.Error
				if !errors.As(err, &e) || e.Status != 401 || !strings.Contains(e.Hint, "revoked") {
					t.Errorf("revoked token %s: %v", tr.ID, err)
				}
			}
			if err := works(ts, other.Token); err != nil {
				t.Errorf("a token that was not revoked is refused: %v", err)
			}
		}
		refused(ts)
		if _, err := admin.RevokeToken(bg(), apitypes.RevokeRequest{Token: "a.b.c"}); !apiclient.IsStatus(err, 404) {
			t.Errorf("revoking a token this server did not sign: %v", err)
		}
		if _, err := admin.RevokeToken(bg(), apitypes.RevokeRequest{ID: "no/such"}); !apiclient.IsStatus(err, 400) {
			t.Errorf("revoking a malformed id: %v", err)
		}
		ts.stop()
		refused(startServer(t, dir, serverOpt{backend: b}))
	})
}

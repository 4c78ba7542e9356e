// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/api"
	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

type server struct {
	addr string
	stop func()
}

// serve runs a real API server on loopback over dir (addr "" picks a port).
func serve(t *testing.T, dir, addr string) *server {
	t.Helper()
	a, _, err := auth.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return serveAPI(t, api.Options{Store: st, Auth: a}, addr)
}

// serveAPI serves an API server with o on loopback at addr ("" picks a
// port) until stopped or t ends; stopping closes the listener, ends every
// watch stream (as a server going away does) and closes o.Store.
func serveAPI(t *testing.T, o api.Options, addr string) *server {
	t.Helper()
	st := o.Store
	srv, err := api.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Serve(ctx, ln, nil); close(done) }()
	s := &server{addr: ln.Addr().String()}
	var once sync.Once
	s.stop = func() { once.Do(func() { cancel(); <-done; st.Close() }) }
	t.Cleanup(s.stop)
	return s
}

func token(t *testing.T, dir string, role auth.Role, node string) string {
	a, err := auth.LoadSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := a.Issue("test", role, node, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// fakeProc makes a procfs-like tree with one process per command line.
func fakeProc(t *testing.T, cmds map[int]string) string {
	root := t.TempDir()
	for pid, cmd := range cmds {
		d := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "cmdline"), []byte(cmd+"\x00"), 0o644)
		os.WriteFile(filepath.Join(d, "comm"), []byte(cmd), 0o644)
	}
	return root
}

type harness struct {
	agent   *Agent
	target  *applier.Recorder
	applied chan uint64
	beats   chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

func startAgent(t *testing.T, url, tok, procRoot, stateFile string, mode string) *harness {
	return startAgentWith(t, url, tok, procRoot, func(o *Options) { o.StateFile, o.Mode = stateFile, mode })
}

// startAgentWith starts an agent in observe mode; opt adjusts its options.
func startAgentWith(t *testing.T, url, tok, procRoot string, opt func(*Options)) *harness {
	h := &harness{target: applier.NewRecorder(), applied: make(chan uint64, 1024), beats: make(chan struct{}, 1024), done: make(chan struct{})}
	app := applier.New(h.target, procRoot, t.TempDir(), nil)
	o := Options{
		Client: apiclient.NewClient(url, tok, nil), Node: "n1", Labels: map[string]string{"zone": "a"},
		Version: "test", Kernel: "k", Interval: time.Second, Applier: app, Mode: ModeObserve, Reason: "no sched_ext",
		BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		OnApplied:   func(rev uint64) { h.applied <- rev },
		OnHeartbeat: func() { h.beats <- struct{}{} },
	}
	opt(&o)
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	h.agent = a
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { a.Run(ctx); close(h.done) }()
	t.Cleanup(func() { cancel(); <-h.done })
	return h
}

// waitApplied waits for the agent to apply revision rev or later.
func (h *harness) waitApplied(t *testing.T, rev uint64) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case got := <-h.applied:
			if got >= rev {
				return
			}
		case <-deadline:
			t.Fatalf("agent did not apply revision %d within 15 s (at %d)", rev, h.agent.Revision())
		}
	}
}

func (h *harness) waitBeat(t *testing.T) {
	t.Helper()
	select {
	case <-h.beats:
	case <-time.After(15 * time.Second):
		t.Fatal("no heartbeat within 15 s")
	}
}

func crit(name, re string) apitypes.Strategy {
	c := strategy.Critical
	return apitypes.Strategy{Strategy: strategy.Strategy{Name: name, Class: &c, CommandRegex: re}}
}

func TestAgentAppliesPushAndReports(t *testing.T) {
	dir := t.TempDir()
	srv := serve(t, dir, "")
	url := "http://" + srv.addr
	admin := apiclient.NewClient(url, token(t, dir, auth.Admin, ""), nil)
	proc := fakeProc(t, map[int]string{100: "nr-gnb -c gnb.yaml", 200: "stress-ng -c 20"})
	h := startAgent(t, url, token(t, dir, auth.Agent, "n1"), proc, "", ModeObserve)
	h.waitApplied(t, 0) // the initial sync

	s, err := admin.CreateStrategy(context.Background(), crit("gnb", "nr-gnb"))
	if err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, s.Revision)
	if e, ok := h.target.Process(100); !ok || e.Class != strategy.Critical {
		t.Fatalf("pid 100 not critical after the push: %+v %v", e, ok)
	}
	if _, ok := h.target.Process(200); ok {
		t.Fatal("pid 200 matched")
	}
	// A strategy for another zone never reaches this node.
	other := crit("elsewhere", "stress")
	other.NodeSelector = map[string]string{"zone": "b"}
	o, _ := admin.CreateStrategy(context.Background(), other)
	h.waitApplied(t, o.Revision)
	if _, ok := h.target.Process(200); ok {
		t.Fatal("strategy for zone b applied on a zone-a node")
	}
	// The next heartbeat carries the resolved workloads and observe mode.
	for {
		h.waitBeat(t)
		n, err := admin.GetNode(context.Background(), "n1")
		if err != nil {
			t.Fatal(err)
		}
		if n.AppliedRevision < o.Revision {
			continue
		}
		if n.Mode != ModeObserve || n.Reason != "no sched_ext" || !n.Healthy || len(n.Workloads) != 1 || n.Workloads[0].PID != 100 || n.Workloads[0].Strategy != "gnb" {
			t.Fatalf("node as reported: %+v", n)
		}
		break
	}
	if _, err := admin.DeleteStrategy(context.Background(), "gnb"); err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, o.Revision+1)
	if _, ok := h.target.Process(100); ok {
		t.Fatal("pid 100 still critical after the strategy was deleted")
	}
}

func TestAgentReconnectsAfterServerRestart(t *testing.T) {
	dir := t.TempDir()
	srv := serve(t, dir, "")
	url := "http://" + srv.addr
	adminTok := token(t, dir, auth.Admin, "")
	proc := fakeProc(t, map[int]string{100: "nr-gnb", 300: "upf"})
	h := startAgent(t, url, token(t, dir, auth.Agent, "n1"), proc, filepath.Join(t.TempDir(), "state.json"), ModeSchedule)
	admin := apiclient.NewClient(url, adminTok, nil)
	s, err := admin.CreateStrategy(context.Background(), crit("gnb", "nr-gnb"))
	if err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, s.Revision)

	srv.stop()
	// Server down: the last strategies stay applied.
	if _, ok := h.target.Process(100); !ok {
		t.Fatal("strategy dropped while the server is down")
	}
	srv = serve(t, dir, srv.addr)
	admin = apiclient.NewClient(url, adminTok, nil)
	s2, err := admin.CreateStrategy(context.Background(), crit("upf", "upf"))
	if err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, s2.Revision)
	if _, ok := h.target.Process(300); !ok {
		t.Fatal("change after the restart not applied")
	}
	if _, ok := h.target.Process(100); !ok {
		t.Fatal("strategy lost across the restart")
	}
}

func TestAgentStartsFromStateWhenServerIsDown(t *testing.T) {
	dir := t.TempDir()
	srv := serve(t, dir, "")
	url := "http://" + srv.addr
	state := filepath.Join(t.TempDir(), "state.json")
	proc := fakeProc(t, map[int]string{100: "nr-gnb"})
	h := startAgent(t, url, token(t, dir, auth.Agent, "n1"), proc, state, ModeSchedule)
	s, err := apiclient.NewClient(url, token(t, dir, auth.Admin, ""), nil).CreateStrategy(context.Background(), crit("gnb", "nr-gnb"))
	if err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, s.Revision)
	h.cancel()
	<-h.done
	srv.stop()

	// A new agent process, no server: strategies come from the state file.
	target := applier.NewRecorder()
	a, err := New(Options{Client: apiclient.NewClient(url, "x", nil), Node: "n1", Applier: applier.New(target, proc, t.TempDir(), nil), StateFile: state})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := target.Process(100); !ok || a.Revision() != s.Revision {
		t.Fatalf("state file not applied at start (revision %d)", a.Revision())
	}
}

// TestGeneration1ClientKeepsAdminStrategies: a generation-1 client that
// re-posts its list (as the reference's operator does every second)
// replaces only its own set; the admin's strategy and the client's latest
// list both reach the agent, and the reported workloads carry the pod the
// process runs in (read from its cgroup).
func TestGeneration1ClientKeepsAdminStrategies(t *testing.T) {
	dir := t.TempDir()
	srv := serve(t, dir, "")
	url := "http://" + srv.addr
	const uid = "0b7d5a2c-1f3e-4c5d-9a8b-7c6d5e4f3a2b"
	const ctr = "4f3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c"
	proc := fakeProc(t, map[int]string{100: "nr-gnb", 200: "ping 10.0.0.1", 300: "iperf3 -s"})
	os.WriteFile(filepath.Join(proc, "100", "cgroup"), []byte("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"+
		strings.ReplaceAll(uid, "-", "_")+".slice/cri-containerd-"+ctr+".scope\n"), 0o644)
	h := startAgentWith(t, url, token(t, dir, auth.Agent, "n1"), proc, func(o *Options) { o.ProcRoot = proc })
	h.waitApplied(t, 0)

	adminTok := token(t, dir, auth.Admin, "")
	admin := apiclient.NewClient(url, adminTok, nil)
	if _, err := admin.CreateStrategy(context.Background(), crit("gnb", "nr-gnb")); err != nil {
		t.Fatal(err)
	}
	post := func(tok, body string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest("POST", url+"/api/v1/scheduling/strategies", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("gen1 post: %d %v %v", resp.StatusCode, out, err)
		}
		return out
	}
	a, err := auth.LoadSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	op, _, err := a.Issue("operator", auth.Admin, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// First post: ping, with the reference example's 20 µs slice.
	out := post(op, `{"strategies":[{"priority":true,"execution_time":20000,"command_regex":"ping"}]}`)
	if w, _ := out["warnings"].([]any); len(w) != 1 || !strings.Contains(w[0].(string), "strategies[0].execution_time: 20000 ns") {
		t.Fatalf("no clamp warning: %v", out)
	}
	// Second post replaces the first: iperf3 instead of ping.
	post(op, `{"strategies":[{"priority":false,"command_regex":"iperf3"}]}`)
	l, err := admin.ListStrategies(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, l.Revision)
	if e, ok := h.target.Process(100); !ok || e.Class != strategy.Critical {
		t.Fatalf("admin strategy lost: pid 100 %+v %v", e, ok)
	}
	if _, ok := h.target.Process(200); ok {
		t.Fatal("the client's first list still applies after its second post")
	}
	if e, ok := h.target.Process(300); !ok || e.Class != strategy.Normal {
		t.Fatalf("the client's second list does not apply: pid 300 %+v %v", e, ok)
	}
	if len(l.Strategies) != 2 || l.Strategies[0].Name != "gnb" || l.Strategies[0].Owner != "" ||
		l.Strategies[1].Name != "operator-0" || l.Strategies[1].Owner != "operator" {
		t.Fatalf("strategies: %+v", l.Strategies)
	}
	for {
		h.waitBeat(t)
		n, err := admin.GetNode(context.Background(), "n1")
		if err != nil {
			t.Fatal(err)
		}
		if n.AppliedRevision < l.Revision {
			continue
		}
		var got *apitypes.Workload
		for i := range n.Workloads {
			if n.Workloads[i].PID == 100 {
				got = &n.Workloads[i]
			}
		}
		if got == nil || got.PodUID != uid || got.ContainerID != ctr {
			t.Fatalf("workload of pid 100 without its pod: %+v", n.Workloads)
		}
		break
	}
}

// TestAgentTokenRotation: the agent reads its token file again when it
// changes, so a new token replaces one that is then revoked, with no
// restart: heartbeats keep being accepted.
func TestAgentTokenRotation(t *testing.T) {
	dir := t.TempDir()
	srv := serve(t, dir, "")
	url := "http://" + srv.addr
	oldTok, newTok := token(t, dir, auth.Agent, "n1"), token(t, dir, auth.Agent, "n1")
	file := filepath.Join(t.TempDir(), "agent.token")
	if err := os.WriteFile(file, []byte(oldTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	proc := fakeProc(t, map[int]string{100: "nr-gnb"})
	h := startAgentWith(t, url, "", proc, func(o *Options) { o.Client = o.Client.WithTokenSource(apiclient.TokenFile(file)) })
	h.waitBeat(t)
	// Rotate (write a new file and rename it over the old, as an operator
	// or a secret mount does), then revoke the old token.
	tmp := file + ".new"
	if err := os.WriteFile(tmp, []byte(newTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	admin := apiclient.NewClient(url, token(t, dir, auth.Admin, ""), nil)
	if _, err := admin.RevokeToken(context.Background(), apitypes.RevokeRequest{Token: oldTok}); err != nil {
		t.Fatal(err)
	}
	if _, err := apiclient.NewClient(url, oldTok, nil).ListStrategies(context.Background()); !apiclient.IsStatus(err, http.StatusUnauthorized) {
		t.Fatalf("the old token still works: %v", err)
	}
	// Two more accepted heartbeats (one may have been in flight): only
	// the new token can have sent them.
	for len(h.beats) > 0 {
		<-h.beats
	}
	h.waitBeat(t)
	h.waitBeat(t)
}

// TestAgentRenewsItsToken: an agent whose token is about to expire renews
// it (apiclient.Renewer, as `swiftlane agent` runs it) and keeps heartbeating past
// the old token's expiry, without a restart.
func TestAgentRenewsItsToken(t *testing.T) {
	dir := t.TempDir()
	srv := serve(t, dir, "")
	url := "http://" + srv.addr
	tok, exp := expiringToken(t, dir)
	r := apiclient.NewRenewer(apiclient.NewClient(url, "", nil), func() (string, error) { return tok, nil }, "", nil)
	renewed := make(chan struct{}, 16)
	r.OnRenew = func(apitypes.TokenResponse) { renewed <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	proc := fakeProc(t, map[int]string{100: "nr-gnb"})
	h := startAgentWith(t, url, "", proc, func(o *Options) { o.Client = o.Client.WithTokenSource(r.Token) })
	select {
	case <-renewed:
	case <-time.After(30 * time.Second):
		t.Fatal("the token was not renewed")
	}
	h.waitBeatAfter(t, exp)
	noneRefused(t, url, dir)
}

// noneRefused: the server at url refused no request (401) so far, so an
// agent renewing its token had no gap in service. It reads the server's
// own request counter with an admin token signed with the key in dir.
func noneRefused(t *testing.T, url, dir string) {
	t.Helper()
	var metrics string
	if err := apiclient.NewClient(url, token(t, dir, auth.Admin, ""), nil).Do(context.Background(), "GET", "/metrics", nil, &metrics); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(metrics, `op="heartbeat"`) {
		t.Fatalf("the server counted no heartbeat:\n%s", metrics)
	}
	for _, m := range regexp.MustCompile(`(?m)^swiftlane_api_requests_total\{code="401",op="([^"]+)"\} (\d+)$`).FindAllStringSubmatch(metrics, -1) {
		t.Errorf("the server refused %s %s request(s): a gap in service around the renewal", m[2], m[1])
	}
}

// expiringToken is an agent token for n1, signed with the key in dir, that
// lasts a minute and has 3 s left: due for renewal at once.
func expiringToken(t *testing.T, dir string) (string, time.Time) {
	t.Helper()
	signer, err := auth.LoadSigner(dir)
	if err != nil {
		t.Fatal(err)
	}
	tok, exp, err := signer.WithClock(func() time.Time { return time.Now().Add(-57 * time.Second) }).Issue("agent:n1", auth.Agent, "n1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return tok, exp
}

// waitBeatAfter waits for a heartbeat accepted after the token that
// expires at exp has expired: only a renewed token can have sent it.
func (h *harness) waitBeatAfter(t *testing.T, exp time.Time) {
	t.Helper()
	for deadline := time.After(30 * time.Second); ; {
		select {
		case <-h.beats:
		case <-deadline:
			t.Fatalf("no heartbeat accepted after the first token expired at %s", exp)
		}
		if time.Now().After(exp.Add(time.Second)) {
			return
		}
	}
}

// The REST agent has no pod source: a selectors strategy pushed to it
// (the embedded store accepts one with a warning) is reported as matching
// nothing here, which its node's /metrics exports.
func TestAgentReportsSelectorsUnmatchable(t *testing.T) {
	dir := t.TempDir()
	srv := serve(t, dir, "")
	url := "http://" + srv.addr
	admin := apiclient.NewClient(url, token(t, dir, auth.Admin, ""), nil)
	proc := fakeProc(t, map[int]string{100: "nr-gnb -c gnb.yaml"})
	var app *applier.Applier
	h := startAgentWith(t, url, token(t, dir, auth.Agent, "n1"), proc, func(o *Options) { app = o.Applier })
	h.waitApplied(t, 0)
	pods := crit("pods", "")
	pods.Selectors = []strategy.Selector{{Key: "app", Value: "ueransim"}}
	s, err := admin.CreateStrategy(context.Background(), pods)
	if err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, s.Revision)
	if got := app.Unmatchable(); len(got) != 1 || got[0].Strategy != "pods" || got[0].Reason != strategy.ReasonNoPodSource {
		t.Fatalf("unmatchable: %+v", got)
	}
	// The heartbeat carries it to the server: the node's record lists it.
	h.waitNode(t, admin, "the node's record to list pods as matching nothing", func(n apitypes.Node) bool {
		return len(n.Unmatchable) == 1 && n.Unmatchable[0].Strategy == "pods" && n.Unmatchable[0].Reason == strategy.ReasonNoPodSource && n.Unmatchable[0].Fix != ""
	})
	if _, err := admin.DeleteStrategy(context.Background(), "pods"); err != nil {
		t.Fatal(err)
	}
	h.waitApplied(t, s.Revision+1)
	if got := app.Unmatchable(); len(got) != 0 {
		t.Fatalf("after the delete: %+v", got)
	}
	h.waitNode(t, admin, "the node's record to list nothing once pods is deleted", func(n apitypes.Node) bool { return len(n.Unmatchable) == 0 })
}

// waitNode waits for an accepted heartbeat after which the server's record
// of node n1 satisfies ok.
func (h *harness) waitNode(t *testing.T, admin *apiclient.Client, what string, ok func(apitypes.Node) bool) {
	t.Helper()
	for range 10 {
		h.waitBeat(t)
		n, err := admin.GetNode(context.Background(), "n1")
		if err != nil {
			t.Fatal(err)
		}
		if ok(n) {
			return
		}
	}
	t.Fatalf("10 heartbeats without %s", what)
}

// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/api"
	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store/crdstore"
	"github.com/swiftlane/swiftlane/internal/store/crdstore/crdtest"
)

func TestMain(m *testing.M) { crdtest.Main(m) }

// serveReplica runs an API server on loopback over the Kubernetes store in
// namespace ns, signing with a (replicas share the key, as the chart's do
// through its Secret), with watch keep-alives every keepAlive (0: the
// default). clock (may be nil) times this replica's strategy writes and
// watch as replica number i.
func serveReplica(t *testing.T, a *auth.Authority, ns string, keepAlive time.Duration, clock *stageClock, i int) *server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := crdtest.Cluster(t).RESTConfig()
	if clock != nil {
		cfg.WrapTransport = clock.wrap
	}
	st, err := crdstore.Open(ctx, crdstore.Options{Config: cfg, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if clock != nil {
		st.OnChange(func() { clock.seen(i, st.Revision()) })
	}
	return serveAPI(t, api.Options{Store: st, Auth: a, KeepAlive: keepAlive}, "")
}

// twoReplicas starts two API servers on one namespace of the Kubernetes
// store, signing with the key in dir (keepAlive: see serveReplica), with
// no SchedulingNode left from other tests.
func twoReplicas(t *testing.T, keepAlive time.Duration) (dir string, reps []*server, urls []string) {
	t.Helper()
	return twoReplicasTimed(t, keepAlive, nil)
}

// twoReplicasTimed is twoReplicas with both replicas' stages on clock.
func twoReplicasTimed(t *testing.T, keepAlive time.Duration, clock *stageClock) (dir string, reps []*server, urls []string) {
	t.Helper()
	cluster := crdtest.Cluster(t)
	ns := crdtest.Namespace(t, cluster)
	crdtest.Kubectl(t, cluster, "", "delete", "schedulingnodes", "--all", "--wait=true")
	dir = t.TempDir()
	a, _, err := auth.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	reps = []*server{serveReplica(t, a, ns, keepAlive, clock, 0), serveReplica(t, a, ns, keepAlive, clock, 1)}
	return dir, reps, []string{"http://" + reps[0].addr, "http://" + reps[1].addr}
}

// stageClock times each change on its way from the writer to the agents,
// for the test's breakdown of the propagation time: when the apiserver
// answered the replica's write, when each replica's watch delivered the
// revision, when each agent received it. The changes are made one at a
// time, so the last strategy write answered belongs to the current change.
type stageClock struct {
	mu       sync.Mutex
	sent     time.Time               // the last strategy write sent to the apiserver
	answered time.Time               // and its answer
	replica  [2]map[uint64]time.Time // revision -> delivered by replica i's watch
	agent    []map[uint64]time.Time  // revision -> received by agent i
}

func newStageClock(agents int) *stageClock {
	c := &stageClock{replica: [2]map[uint64]time.Time{{}, {}}}
	for range agents {
		c.agent = append(c.agent, map[uint64]time.Time{})
	}
	return c
}

// wrap is the replicas' rest.Config.WrapTransport: it notes when the
// apiserver answers a write to a SchedulingStrategy.
func (c *stageClock) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		write := r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/schedulingstrategies") && r.URL.Query().Get("dryRun") == ""
		sent := time.Now()
		resp, err := rt.RoundTrip(r)
		if write {
			c.mu.Lock()
			c.sent, c.answered = sent, time.Now()
			c.mu.Unlock()
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// note records now as the first time m saw rev.
func (c *stageClock) note(m map[uint64]time.Time, rev uint64) {
	now := time.Now()
	c.mu.Lock()
	if _, ok := m[rev]; !ok {
		m[rev] = now
	}
	c.mu.Unlock()
}

func (c *stageClock) seen(i int, rev uint64) { c.note(c.replica[i], rev) }

func (c *stageClock) received(i int) func(uint64) {
	return func(rev uint64) { c.note(c.agent[i], rev) }
}

// firstAt is when the first revision >= rev was recorded in m (a watch may
// deliver two changes in one go).
func firstAt(m map[uint64]time.Time, rev uint64) time.Time {
	var at time.Time
	for r, t := range m {
		if r >= rev && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	return at
}

// applyLog is what one agent applied: each revision, when.
type applyLog struct {
	mu   sync.Mutex
	revs []uint64
	at   []time.Time
}

// fleet tracks every agent's applies and wakes waiters on each.
type fleet struct {
	mu    sync.Mutex
	logs  []*applyLog
	agent []*Agent
	wake  chan struct{}
}

func (f *fleet) record(i int) func(uint64) {
	return func(rev uint64) {
		now := time.Now()
		l := f.logs[i]
		l.mu.Lock()
		l.revs, l.at = append(l.revs, rev), append(l.at, now)
		l.mu.Unlock()
		f.mu.Lock()
		close(f.wake)
		f.wake = make(chan struct{})
		f.mu.Unlock()
	}
}

// waitAll waits until every agent has applied rev, and returns when the
// last of them did.
func (f *fleet) waitAll(t *testing.T, rev uint64) time.Time {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		f.mu.Lock()
		wake := f.wake
		f.mu.Unlock()
		var last time.Time
		all := true
		for _, l := range f.logs {
			l.mu.Lock()
			i := slices.IndexFunc(l.revs, func(r uint64) bool { return r >= rev })
			if i < 0 {
				all = false
			} else if l.at[i].After(last) {
				last = l.at[i]
			}
			l.mu.Unlock()
		}
		if all {
			return last
		}
		select {
		case <-wake:
		case <-deadline:
			t.Fatalf("not every agent applied revision %d within 30 s", rev)
		}
	}
}

// TestAgentsAcrossReplicas: two API servers on one Kubernetes store (the
// real kube-apiserver test control plane), four REST agents split between
// them, each told of the other replica as its failover.
//
// A change through either replica reaches every agent (the p99 from the
// write to the last agent's apply is logged). Then one replica stops while
// changes go on through the other: its agents move over and resume their
// watch, and every agent has applied each change exactly once, in order
// (the revisions are etcd's, the same on both replicas).
//
// The agents run in observe mode with an applier.Recorder as the target:
// the host has no sched_ext, and what is tested is the control plane's
// delivery; the Recorder holds what the BPF maps would.
func TestAgentsAcrossReplicas(t *testing.T) {
	const agents = 4
	clock := newStageClock(agents)
	dir, reps, urls := twoReplicasTimed(t, 0, clock)
	adminTok := token(t, dir, auth.Admin, "")
	admins := []*apiclient.Client{apiclient.NewClient(urls[0], adminTok, nil), apiclient.NewClient(urls[1], adminTok, nil)}

	f := &fleet{wake: make(chan struct{})}
	proc := fakeProc(t, map[int]string{100: "nr-gnb"})
	for i := range agents {
		f.logs = append(f.logs, &applyLog{})
		home := i % 2
		node := fmt.Sprintf("n%d", i)
		tok := token(t, dir, auth.Agent, node)
		h := startAgentWith(t, urls[home], tok, proc, func(o *Options) {
			o.Node = node
			o.Failover = []*apiclient.Client{apiclient.NewClient(urls[1-home], tok, nil)}
			o.OnApplied = f.record(i)
			o.OnReceived = clock.received(i)
			o.OnHeartbeat = nil
		})
		f.agent = append(f.agent, h.agent)
	}
	f.waitAll(t, 0) // each agent's initial sync
	var written []uint64
	ctx := context.Background()
	// change makes the i-th change through admin: create, update or delete
	// of one of a few strategies, so all three kinds are timed.
	change := func(admin *apiclient.Client, i int) (uint64, error) {
		name := fmt.Sprintf("s%d", i/3%5)
		switch i % 3 {
		case 0:
			s, err := admin.CreateStrategy(ctx, crit(name, fmt.Sprintf("create-%d", i)))
			return s.Revision, err
		case 1:
			s, err := admin.PutStrategy(ctx, crit(name, fmt.Sprintf("update-%d", i)))
			return s.Revision, err
		default:
			d, err := admin.DeleteStrategy(ctx, name)
			return d.Revision, err
		}
	}

	n := 300
	if testing.Short() {
		n = 60
	}
	// total: the write sent until the last agent applied it; write: until
	// the replica answered (the apiserver's write and its own watch back),
	// which is often later than every agent's apply (early).
	var total, write []time.Duration
	// The stages of each change, one after the other: the replica's
	// handling until it sends the write, the apiserver's answer, the slower
	// replica watch's delivery after that answer (negative when a watch
	// was first), the slowest agent's receipt after its replica had the
	// change, and that agent's apply.
	stage := map[string][]time.Duration{}
	stages := []string{"replica handling", "apiserver write", "watch to both replicas", "stream to every agent", "agent apply"}
	early := 0
	for i := range n {
		start := time.Now()
		rev, err := change(admins[i%2], i)
		if err != nil {
			t.Fatalf("change %d through replica %d: %v", i, i%2, err)
		}
		answered := time.Now()
		written = append(written, rev)
		last := f.waitAll(t, rev)
		total, write = append(total, last.Sub(start)), append(write, answered.Sub(start))
		if !last.After(answered) {
			early++
		}
		clock.mu.Lock()
		sent, apiserver, watched := clock.sent, clock.answered, firstAt(clock.replica[0], rev)
		if r1 := firstAt(clock.replica[1], rev); r1.After(watched) {
			watched = r1
		}
		var streamed, applied time.Duration
		for a := range agents {
			recv := firstAt(clock.agent[a], rev)
			streamed = max(streamed, recv.Sub(firstAt(clock.replica[a%2], rev)))
			f.logs[a].mu.Lock()
			at := f.logs[a].at[slices.IndexFunc(f.logs[a].revs, func(r uint64) bool { return r >= rev })] // waitAll found it
			applied = max(applied, at.Sub(recv))
			f.logs[a].mu.Unlock()
		}
		clock.mu.Unlock()
		for j, d := range []time.Duration{sent.Sub(start), apiserver.Sub(sent), watched.Sub(apiserver), streamed, applied} {
			stage[stages[j]] = append(stage[stages[j]], d)
		}
	}
	p := func(d []time.Duration, q float64) float64 {
		slices.Sort(d)
		return ms(d[min(len(d)-1, int(float64(len(d))*q))])
	}
	t.Logf("BenchmarkTwoReplicaPropagation\t%d changes\t%d agents\tp50 %.2f ms\tp99 %.2f ms\tmax %.2f ms\twrite answered p99 %.2f ms\tapplied everywhere before the answer %d%%",
		n, agents, p(total, 0.50), p(total, 0.99), p(total, 1), p(write, 0.99), 100*early/n)
	for _, name := range stages {
		d := stage[name]
		t.Logf("  stage %-24s p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms  max %6.2f ms", name, p(d, 0.5), p(d, 0.9), p(d, 0.99), p(d, 1))
	}

	// Stop replica 0 while a writer makes changes through replica 1, then
	// make more once it is gone.
	const during, after = 40, 20
	errc := make(chan error, 1)
	revs := make(chan []uint64, 1)
	go func() {
		var got []uint64
		for i := range during {
			rev, err := change(admins[1], n+i)
			if err != nil {
				errc <- fmt.Errorf("change %d during the stop: %w", i, err)
				return
			}
			got = append(got, rev)
		}
		errc <- nil
		revs <- got
	}()
	reps[0].stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	written = append(written, <-revs...)
	for i := range after {
		rev, err := change(admins[1], n+during+i)
		if err != nil {
			t.Fatalf("change %d after the stop: %v", i, err)
		}
		written = append(written, rev)
	}
	f.waitAll(t, written[len(written)-1])

	// Each agent: its initial sync, then every change exactly once, in
	// order; the ones that watched replica 0 now watch replica 1.
	for i, l := range f.logs {
		l.mu.Lock()
		got := slices.Clone(l.revs)
		l.mu.Unlock()
		if len(got) == 0 || !slices.Equal(got[1:], written) {
			t.Errorf("agent n%d applied revisions %v after its sync at %v; the changes were %v", i, got[1:], got[:1], written)
		}
		// Server 0 is the agent's own replica, 1 its failover.
		if want := 1 - i%2; f.agent[i].Server() != want {
			t.Errorf("agent n%d on server %d, want %d (its replica was %d)", i, f.agent[i].Server(), want, i%2)
		}
	}
	// Every agent holds what the surviving replica lists.
	l, err := admins[1].ListStrategies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, ag := range f.agent {
		ag.mu.Lock()
		names := make([]string, 0, len(ag.strategies))
		for name := range ag.strategies {
			names = append(names, name)
		}
		ag.mu.Unlock()
		want := make([]string, 0, len(l.Strategies))
		for _, s := range l.Strategies {
			want = append(want, s.Name)
		}
		slices.Sort(names)
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("agent n%d holds %v; replica 1 lists %v", i, names, want)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// SPDX-License-Identifier: Apache-2.0

package crdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/crdconv"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// These tests need a kube-apiserver (see cluster in kube_test.go) and skip
// without one. Each test has a namespace of its own; nodes are
// cluster-scoped, so the tests that use them clear them first.

func strat(name, re string) apitypes.Strategy {
	return apitypes.Strategy{Strategy: strategy.Strategy{Name: name, Class: class(strategy.Critical), CommandRegex: re}}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// changed returns a channel that receives after every change the store's
// watch applies.
func changed(s *Store) <-chan struct{} {
	ch := make(chan struct{}, 1)
	s.OnChange(func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	return ch
}

// await waits, change by change, until cond holds.
func await(t *testing.T, ch <-chan struct{}, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for !cond() {
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestStrategiesInKubernetes(t *testing.T) {
	c := cluster(t)
	ctx := ctxT(t)
	ns := c.namespace(t)
	s := c.open(t, ns, 0)
	a, err := s.CreateStrategy(ctx, strat("a", "x"))
	if err != nil || a.Revision == 0 || a.CreatedRevision == 0 || a.EffectiveClass() != strategy.Critical {
		t.Fatalf("create: %+v %v", a, err)
	}
	if _, err := s.CreateStrategy(ctx, strat("a", "y")); !errors.Is(err, store.ErrExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	if _, err := s.UpdateStrategy(ctx, strat("nope", "y")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update unknown: %v", err)
	}
	b, err := s.CreateStrategy(ctx, strat("b", "y"))
	if err != nil || b.Revision <= a.Revision || b.CreatedRevision <= a.CreatedRevision {
		t.Fatalf("second create after %d/%d: %+v %v", a.Revision, a.CreatedRevision, b, err)
	}
	u, err := s.UpdateStrategy(ctx, strat("a", "z"))
	if err != nil || u.Revision <= b.Revision || u.CreatedRevision != a.CreatedRevision || u.CommandRegex != "z" {
		t.Fatalf("update: %+v %v", u, err)
	}
	// An update that changes nothing writes nothing.
	if same, err := s.UpdateStrategy(ctx, strat("a", "z")); err != nil || same.Revision != u.Revision {
		t.Fatalf("no-op update: %+v %v", same, err)
	}
	list, rev, err := s.ListStrategies(ctx)
	if err != nil || rev != u.Revision || len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" {
		t.Fatalf("list: rev %d (want %d) %+v %v", rev, u.Revision, list, err)
	}
	ch, cur, err := s.Changes(ctx, a.Revision, 0)
	if err != nil || cur != u.Revision || len(ch) != 2 || ch[0].Revision != b.Revision || ch[1].Name != "a" || ch[1].Strategy.CommandRegex != "z" {
		t.Fatalf("changes after %d: %+v %d %v", a.Revision, ch, cur, err)
	}
	drev, err := s.DeleteStrategy(ctx, "b")
	if err != nil || drev <= u.Revision {
		t.Fatalf("delete: %d %v", drev, err)
	}
	if _, err := s.DeleteStrategy(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete again: %v", err)
	}
	if ch, _, err := s.Changes(ctx, u.Revision, 0); err != nil || len(ch) != 1 || ch[0].Type != store.Delete || ch[0].Revision != drev {
		t.Fatalf("delete change: %+v %v", ch, err)
	}
	// Another store on the namespace (a restart, or a second replica) sees
	// the same strategies with the same revisions and precedence.
	s2 := c.open(t, ns, 0)
	list2, rev2, err := s2.ListStrategies(ctx)
	if err != nil || rev2 < drev || len(list2) != 1 || !sameView(list2[0], list[0]) || list2[0].Revision != u.Revision {
		t.Fatalf("reopened: rev %d %+v %v (before: %+v)", rev2, list2, err, list[0])
	}
	if _, _, err := s2.Changes(ctx, drev-1, 0); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("reopened store resumed from before its list: %v", err)
	}
}

func TestChangeLogCompaction(t *testing.T) {
	c := cluster(t)
	ctx := ctxT(t)
	s := c.open(t, c.namespace(t), 3)
	var revs []uint64
	for i := range 6 {
		st, err := s.CreateStrategy(ctx, strat(fmt.Sprintf("s%d", i), "x"))
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, st.Revision)
	}
	if _, cur, err := s.Changes(ctx, revs[1], 0); !errors.Is(err, store.ErrCompacted) || cur != revs[5] {
		t.Fatalf("old revision: %d %v", cur, err)
	}
	if _, _, err := s.Changes(ctx, revs[5]+1000, 0); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("future revision: %v", err)
	}
	ch, cur, err := s.Changes(ctx, revs[2], 0)
	if err != nil || cur != revs[5] || len(ch) != 3 || ch[0].Revision != revs[3] {
		t.Fatalf("resumable revision: %d %+v %v", cur, ch, err)
	}
	if ch, _, err := s.Changes(ctx, revs[2], 2); err != nil || len(ch) != 2 {
		t.Fatalf("limit: %+v %v", ch, err)
	}
	// A relist (what an expired watch leads to) restarts the log at the
	// list's revision: revs[4] was resumable, now it is not.
	if _, _, err := s.Changes(ctx, revs[4], 0); err != nil {
		t.Fatal(err)
	}
	if err := s.relist(ctx); err != nil {
		t.Fatal(err)
	}
	if _, cur, err := s.Changes(ctx, revs[4], 0); !errors.Is(err, store.ErrCompacted) || cur < revs[5] {
		t.Fatalf("resume across a relist: %d %v", cur, err)
	}
	if list, _, _ := s.ListStrategies(ctx); len(list) != 6 {
		t.Fatalf("after relist: %d strategies", len(list))
	}
}

// TestObjectsFromKubectl: strategies applied with kubectl show up in the
// list and the change log; ones the API cannot represent are reported and
// turn into deletions.
func TestObjectsFromKubectl(t *testing.T) {
	c := cluster(t)
	ctx := ctxT(t)
	ns := c.namespace(t)
	s := c.open(t, ns, 0)
	wake := changed(s)
	api, err := s.CreateStrategy(ctx, strat("from-api", "x"))
	if err != nil {
		t.Fatal(err)
	}
	c.kubectl(t, `
apiVersion: swiftlane.io/v1alpha1
kind: SchedulingStrategy
metadata: {name: upf, namespace: `+ns+`}
spec:
  class: high
  slice: 2ms
  podSelector: {matchLabels: {app: upf}}
  namespaceSelector:
    matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [free5gc]}]
`, "apply", "-f", "-")
	var upf apitypes.Strategy
	await(t, wake, "upf in the list", func() bool {
		upf, err = s.GetStrategy(ctx, "upf")
		return err == nil
	})
	if upf.EffectiveClass() != strategy.High || upf.ExecutionTime != 2_000_000 || len(upf.Selectors) != 1 ||
		upf.Namespaces[0] != "free5gc" || upf.CreatedRevision != 0 {
		t.Fatalf("kubectl object: %+v", upf)
	}
	list, _, _ := s.ListStrategies(ctx)
	if len(list) != 2 || list[0].Name != "upf" { // no annotation: before the API's
		t.Fatalf("precedence: %+v", list)
	}
	ch, _, err := s.Changes(ctx, api.Revision, 0)
	if err != nil || len(ch) != 1 || ch[0].Type != store.Put || ch[0].Name != "upf" || ch[0].Revision != upf.Revision {
		t.Fatalf("change log: %+v %v", ch, err)
	}
	// Edited into something the API cannot say: reported, and a deletion.
	c.kubectl(t, "", "-n", ns, "patch", "schedulingstrategy", "upf", "--type=merge",
		"-p", `{"spec":{"podSelector":{"matchLabels":null,"matchExpressions":[{"key":"app","operator":"Exists"}]}}}`)
	await(t, wake, "upf gone from the list", func() bool {
		_, err := s.GetStrategy(ctx, "upf")
		return errors.Is(err, store.ErrNotFound)
	})
	p := s.Unrepresentable()
	if len(p) != 1 || p[0].Name != "upf" || !strings.Contains(p[0].Reason, "matchExpressions") {
		t.Fatalf("unrepresentable: %+v", p)
	}
	ch, _, err = s.Changes(ctx, upf.Revision, 0)
	if err != nil || len(ch) != 1 || ch[0].Type != store.Delete || ch[0].Name != "upf" {
		t.Fatalf("change log after the edit: %+v %v", ch, err)
	}
	// A PUT through the API makes it representable again.
	fixed, err := s.UpdateStrategy(ctx, strat("upf", "upf"))
	if err != nil || fixed.CommandRegex != "upf" || len(s.Unrepresentable()) != 0 {
		t.Fatalf("update of an unrepresentable object: %+v %v %+v", fixed, err, s.Unrepresentable())
	}
	// kubectl delete is a deletion in the log.
	c.kubectl(t, "", "-n", ns, "delete", "schedulingstrategy", "upf")
	await(t, wake, "upf deleted", func() bool {
		_, err := s.GetStrategy(ctx, "upf")
		return errors.Is(err, store.ErrNotFound)
	})
	if ch, _, err := s.Changes(ctx, fixed.Revision, 0); err != nil || len(ch) != 1 || ch[0].Type != store.Delete {
		t.Fatalf("kubectl delete: %+v %v", ch, err)
	}
}

// TestFinalizerHeldDeletion: an object whose deletion waits for a
// finalizer is gone for the API at once, and once only.
func TestFinalizerHeldDeletion(t *testing.T) {
	c := cluster(t)
	ctx := ctxT(t)
	ns := c.namespace(t)
	s := c.open(t, ns, 0)
	st, err := s.CreateStrategy(ctx, strat("held", "x"))
	if err != nil {
		t.Fatal(err)
	}
	c.kubectl(t, "", "-n", ns, "patch", "schedulingstrategy", "held", "--type=merge", "-p", `{"metadata":{"finalizers":["example.com/hold"]}}`)
	// A finalizer is no change for the API (no OnChange): wait for the
	// watch to deliver it instead.
	if err := s.waitUntil(ctx, "the finalizer", func() bool { e := s.objs["held"]; return e != nil && len(e.obj.Finalizers) == 1 }); err != nil {
		t.Fatal(err)
	}
	rev, err := s.DeleteStrategy(ctx, "held")
	if err != nil || rev <= st.Revision {
		t.Fatalf("delete: %d %v", rev, err)
	}
	if _, err := s.GetStrategy(ctx, "held"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("held object still shown: %v", err)
	}
	c.kubectl(t, "", "-n", ns, "patch", "schedulingstrategy", "held", "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	if err := s.waitUntil(ctx, "the object gone", func() bool { return s.objs["held"] == nil }); err != nil {
		t.Fatal(err)
	}
	ch, _, err := s.Changes(ctx, st.Revision, 0)
	if err != nil || len(ch) != 1 || ch[0].Type != store.Delete || ch[0].Revision != rev {
		t.Fatalf("changes: %+v %v", ch, err)
	}
}

// TestValidationByTheAPIServer: what only the CRD's schema and CEL rules
// refuse comes back as a field error in the API's terms, and writes nothing.
func TestValidationByTheAPIServer(t *testing.T) {
	c := cluster(t)
	ctx := ctxT(t)
	s := c.open(t, c.namespace(t), 0)
	before := s.Revision()
	ns := strat("scoped", "x")
	ns.Namespaces = []string{"free5gc"} // without selectors: the CEL rule
	long := strat("long", strings.Repeat("a", 1025))
	under := strat("under_score", "x") // a valid API name, not a Kubernetes one
	for _, tc := range []struct {
		s     apitypes.Strategy
		field string
	}{{ns, "namespaces"}, {long, "command_regex"}, {under, "name"}} {
		_, err := s.CreateStrategy(ctx, tc.s)
		var fe *strategy.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.field || fe.Msg == "" {
			t.Errorf("%s: %v, want a field error on %s", tc.s.Name, err, tc.field)
		}
	}
	if list, rev, _ := s.ListStrategies(ctx); len(list) != 0 || rev != before {
		t.Fatalf("refused writes changed the store: rev %d %+v", rev, list)
	}
}

func TestReplaceStrategies(t *testing.T) {
	c := cluster(t)
	ctx := ctxT(t)
	s := c.open(t, c.namespace(t), 0)
	names := func(l []apitypes.Strategy) string {
		var n []string
		for _, s := range l {
			n = append(n, s.Name)
		}
		return strings.Join(n, ",")
	}
	l, rev, err := s.ReplaceStrategies(ctx, "", []apitypes.Strategy{strat("a", "x"), strat("b", "y")})
	if err != nil || names(l) != "a,b" {
		t.Fatalf("first replace: %+v %v", l, err)
	}
	// The same list again writes nothing.
	if l2, rev2, err := s.ReplaceStrategies(ctx, "", []apitypes.Strategy{strat("a", "x"), strat("b", "y")}); err != nil || rev2 != rev || names(l2) != "a,b" {
		t.Fatalf("idempotent replace: rev %d (was %d) %v", rev2, rev, err)
	}
	// A refused entry refuses the list: nothing written, nothing deleted.
	bad := strat("c", "z")
	bad.Namespaces = []string{"oai"}
	_, _, err = s.ReplaceStrategies(ctx, "", []apitypes.Strategy{strat("b", "changed"), bad})
	var fe *strategy.FieldError
	if !errors.As(err, &fe) || fe.Field != "strategies[1].namespaces" {
		t.Fatalf("refused entry: %v", err)
	}
	if l, r, _ := s.ListStrategies(ctx); r != rev || names(l) != "a,b" || l[1].CommandRegex != "y" {
		t.Fatalf("refused replace changed the store: rev %d %+v", r, l)
	}
	// New order, one changed, one added, one dropped.
	b := strat("b", "y")
	b.Inherit = true
	l, rev3, err := s.ReplaceStrategies(ctx, "", []apitypes.Strategy{b, strat("c", "z"), strat("a", "x")})
	if err != nil || names(l) != "b,c,a" || !l[0].Inherit || rev3 <= rev {
		t.Fatalf("reorder: %+v %v", l, err)
	}
	l, _, err = s.ReplaceStrategies(ctx, "", []apitypes.Strategy{strat("c", "z")})
	if err != nil || names(l) != "c" {
		t.Fatalf("shrink: %+v %v", l, err)
	}
	if _, err := s.GetStrategy(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a should be gone: %v", err)
	}
	if l, _, err := s.ReplaceStrategies(ctx, "", nil); err != nil || len(l) != 0 {
		t.Fatalf("empty replace: %+v %v", l, err)
	}
}

// TestUpdateKeepsOthersWrites: an update based on a stale object conflicts,
// is re-read, and keeps what others wrote meanwhile (here a label).
func TestUpdateKeepsOthersWrites(t *testing.T) {
	c := cluster(t)
	ctx := ctxT(t)
	ns := c.namespace(t)
	s := c.open(t, ns, 0)
	if _, err := s.CreateStrategy(ctx, strat("a", "x")); err != nil {
		t.Fatal(err)
	}
	stale := s.current("a")
	c.kubectl(t, "", "-n", ns, "label", "schedulingstrategy", "a", "team=ran")
	out, err := s.update(ctx, stale, "", false, func(o *v1alpha1.SchedulingStrategy) { o.Spec.CommandRegex = "new" })
	if err != nil || out.Labels["team"] != "ran" || out.Spec.CommandRegex != "new" || out.ResourceVersion == stale.ResourceVersion {
		t.Fatalf("update from a stale object: %+v %v", out, err)
	}
}

func TestNodesInKubernetes(t *testing.T) {
	c := cluster(t)
	ctx := ctxT(t)
	s := c.open(t, c.namespace(t), 0)
	c.clearNodes(t)
	now := time.Now()
	if _, err := s.Heartbeat(ctx, "n1", apitypes.Heartbeat{}, now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("heartbeat before register: %v", err)
	}
	n, err := s.RegisterNode(ctx, "n1", apitypes.Registration{Mode: "observe", HeartbeatSeconds: 5, Kernel: "7.3", Labels: map[string]string{"zone": "a"}}, now)
	if err != nil || n.Mode != "observe" || n.Labels["zone"] != "a" || n.RegisteredAt.Unix() != now.Unix() {
		t.Fatalf("register: %+v %v", n, err)
	}
	ws := make([]apitypes.Workload, crdconv.MaxWorkloads+1)
	for i := range ws {
		ws[i] = apitypes.Workload{PID: i + 1, Strategy: "s", Class: "critical", Cmdline: "x"}
	}
	pod := apitypes.Workload{PID: 1, Strategy: "s", Class: "critical", Cmdline: "x", PodName: "gnb-0", Namespace: "ran",
		PodUID: "0b7d5a2c-1f3e-4c5d-9a8b-7c6d5e4f3a2b", Container: "gnb", ContainerID: "4f3c2b1a0f9e"}
	ws[0] = pod
	counters := &apitypes.Counters{Enqueued: map[string]uint64{"critical": 5}}
	if _, err := s.Heartbeat(ctx, "n1", apitypes.Heartbeat{SchedulerState: "enabled", AppliedRevision: 42, Workloads: ws, Counters: counters}, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	// Re-registering keeps the last heartbeat and replaces the labels.
	if _, err := s.RegisterNode(ctx, "n1", apitypes.Registration{Mode: "schedule", HeartbeatSeconds: 5, Labels: map[string]string{"zone": "b"}}, now.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	n, err = s.GetNode(ctx, "n1")
	if err != nil || n.Mode != "schedule" || len(n.Labels) != 1 || n.Labels["zone"] != "b" || n.AppliedRevision != 42 ||
		n.SchedulerState != "enabled" || len(n.Workloads) != crdconv.MaxWorkloads || n.Counters == nil || n.Counters.Enqueued["critical"] != 5 ||
		n.LastHeartbeat.Unix() != now.Add(time.Second).Unix() || n.Workloads[0] != pod {
		t.Fatalf("node: %+v %v", n, err)
	}
	if _, err := s.RegisterNode(ctx, "n2", apitypes.Registration{Mode: "observe", HeartbeatSeconds: 5}, now); err != nil {
		t.Fatal(err)
	}
	nodes, err := s.ListNodes(ctx)
	if err != nil || len(nodes) != 2 {
		t.Fatalf("list: %+v %v", nodes, err)
	}
	if err := s.DeleteNode(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteNode(ctx, "n1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete again: %v", err)
	}
	if _, err := s.GetNode(ctx, "n1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
}

// TestTwoReplicas: two stores on one namespace (two API replicas) update
// the same strategy concurrently, several writers each, without errors or
// lost writes (every write is in the change log), converge, and keep the
// same change log, so a watch can resume on either.
func TestTwoReplicas(t *testing.T) {
	c := cluster(t)
	ctx := ctxT(t)
	ns := c.namespace(t)
	r1, r2 := c.open(t, ns, 0), c.open(t, ns, 0)
	wake1, wake2 := changed(r1), changed(r2)
	a, err := r1.CreateStrategy(ctx, strat("a", "x"))
	if err != nil {
		t.Fatal(err)
	}
	await(t, wake2, "a on the second replica", func() bool { _, err := r2.GetStrategy(ctx, "a"); return err == nil })
	// With 5 immediate re-reads, 2 writers x 5 updates lost a write now
	// and then; 8 writers x 10 updates collide on nearly every write.
	const writers, n = 4, 10 // per replica
	errs := make(chan error, 2*writers*n)
	written := map[string]bool{}
	for ri, r := range []*Store{r1, r2} {
		for w := range writers {
			for i := range n {
				written[fmt.Sprintf("r%d-w%d-%d", ri, w, i)] = true
			}
			go func() {
				for i := range n {
					_, err := r.UpdateStrategy(ctx, strat("a", fmt.Sprintf("r%d-w%d-%d", ri, w, i)))
					errs <- err
				}
			}()
		}
	}
	for range 2 * writers * n {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent update: %v", err)
		}
	}
	// Either replica's last write may be the newer: wait until both have
	// seen both.
	top := max(r1.Revision(), r2.Revision())
	await(t, wake1, "the first replica to catch up", func() bool { return r1.Revision() >= top })
	await(t, wake2, "the second replica to catch up", func() bool { return r2.Revision() >= top })
	want, rev, _ := r1.ListStrategies(ctx)
	got, rev2, _ := r2.ListStrategies(ctx)
	if rev2 != rev || len(got) != 1 || !sameView(got[0], want[0]) || got[0].Revision != want[0].Revision {
		t.Fatalf("replicas differ: %d %+v vs %d %+v", rev, want, rev2, got)
	}
	c1, _, err1 := r1.Changes(ctx, a.Revision, 0)
	c2, _, err2 := r2.Changes(ctx, a.Revision, 0)
	if err1 != nil || err2 != nil || len(c1) == 0 || jsonOf(t, c1) != jsonOf(t, c2) {
		t.Fatalf("change logs differ: %v %v\n%+v\n%+v", err1, err2, c1, c2)
	}
	// Every write is a change of its own (each wrote a value of its own).
	for _, ch := range c1 {
		if ch.Type == store.Put {
			delete(written, ch.Strategy.CommandRegex)
		}
	}
	if len(written) != 0 || len(c1) != 2*writers*n {
		t.Fatalf("%d changes for %d writes; not in the log: %v", len(c1), 2*writers*n, written)
	}
}

// TestUpdateConflictsUntilDeadline: a write that conflicts on every try
// (another replica writes the object between each read and write) backs
// off and ends at the request's deadline with store.ErrBusy, not before
// and not long after.
func TestUpdateConflictsUntilDeadline(t *testing.T) {
	c := cluster(t)
	ctx := ctxT(t)
	ns := c.namespace(t)
	r1, r2 := c.open(t, ns, 0), c.open(t, ns, 0)
	if _, err := r1.CreateStrategy(ctx, strat("a", "x")); err != nil {
		t.Fatal(err)
	}
	wake2 := changed(r2)
	await(t, wake2, "a on the second replica", func() bool { _, err := r2.GetStrategy(ctx, "a"); return err == nil })
	const deadline = time.Second
	dctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	tries := 0
	start := time.Now()
	_, err := r1.update(dctx, r1.current("a"), "", false, func(o *v1alpha1.SchedulingStrategy) {
		tries++
		o.Spec.CommandRegex = "never"
		if _, err := r2.UpdateStrategy(ctx, strat("a", fmt.Sprintf("other-%d", tries))); err != nil {
			t.Errorf("interfering write: %v", err)
		}
	})
	took := time.Since(start)
	var ce *ConflictError
	if !errors.Is(err, store.ErrBusy) || !errors.As(err, &ce) || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("after %d tries in %s: %v, want a ConflictError at the deadline", tries, took, err)
	}
	if took < deadline || took > deadline+500*time.Millisecond || tries < 3 {
		t.Fatalf("%d tries over %s, want several, ending at the %s deadline: %v", tries, took, deadline, err)
	}
	t.Logf("%d tries in %s: %v", tries, took, err)
	if st, _ := r2.GetStrategy(ctx, "a"); st.CommandRegex == "never" {
		t.Fatal("the refused write was written")
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

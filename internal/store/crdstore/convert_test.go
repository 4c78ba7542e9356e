// SPDX-License-Identifier: Apache-2.0

package crdstore

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/swiftlane/swiftlane/apis/swiftlane/v1alpha1"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/crdconv"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

func class(c strategy.Class) *strategy.Class { return &c }
func boolp(b bool) *bool                     { return &b }

func TestStrategyRoundTrip(t *testing.T) {
	cases := []struct {
		in, want apitypes.Strategy // want: the API's view after a write (zero: in)
	}{
		{in: apitypes.Strategy{Strategy: strategy.Strategy{Name: "gnb", Class: class(strategy.Critical), CommandRegex: "nr-gnb|nr-ue", Inherit: true, ExecutionTime: 20_000_000}}},
		{in: apitypes.Strategy{Strategy: strategy.Strategy{Name: "b.g-1", Class: class(strategy.Background), CgroupPath: "/batch.slice", PID: 4242, ExecutionTime: 50_000}}},
		{in: apitypes.Strategy{Strategy: strategy.Strategy{Name: "pods", Class: class(strategy.High),
			Selectors: []strategy.Selector{{Key: "app", Value: "upf"}, {Key: "5g.io/role", Value: ""}}},
			Namespaces: []string{"free5gc", "oai"}, NodeSelector: map[string]string{"zone": "a"}},
			want: apitypes.Strategy{Strategy: strategy.Strategy{Name: "pods", Class: class(strategy.High),
				Selectors: []strategy.Selector{{Key: "5g.io/role", Value: ""}, {Key: "app", Value: "upf"}}}, // matchLabels: by key
				Namespaces: []string{"free5gc", "oai"}, NodeSelector: map[string]string{"zone": "a"}}},
		// The generation-1 flag becomes the class.
		{in: apitypes.Strategy{Strategy: strategy.Strategy{Name: "strategy-0", Priority: boolp(true), CommandRegex: "x"}},
			want: apitypes.Strategy{Strategy: strategy.Strategy{Name: "strategy-0", Class: class(strategy.Critical), CommandRegex: "x"}}},
		{in: apitypes.Strategy{Strategy: strategy.Strategy{Name: "strategy-1", Priority: boolp(false), PID: 7}},
			want: apitypes.Strategy{Strategy: strategy.Strategy{Name: "strategy-1", Class: class(strategy.Normal), PID: 7}}},
	}
	for _, tc := range cases {
		if tc.want.Name == "" {
			tc.want = tc.in
		}
		o, err := toObject("ns", tc.in)
		if err != nil {
			t.Fatalf("%s: toObject: %v", tc.in.Name, err)
		}
		// Through JSON, as the API server stores it.
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var back v1alpha1.SchedulingStrategy
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		got, err := fromObject(&back)
		if err != nil {
			t.Fatalf("%s: fromObject: %v\n%s", tc.in.Name, err, data)
		}
		if !sameView(got, tc.want) || got.Priority != nil {
			t.Errorf("%s: round trip\n got %+v\nwant %+v\nobject %s", tc.in.Name, got, tc.want, data)
		}
	}
}

func TestSliceIsADuration(t *testing.T) {
	o, err := toObject("ns", apitypes.Strategy{Strategy: strategy.Strategy{Name: "a", Class: class(strategy.High), CommandRegex: "x", ExecutionTime: 1_500_000}})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(o.Spec)
	if !strings.Contains(string(data), `"slice":"1.5ms"`) {
		t.Fatalf("spec %s: want slice 1.5ms", data)
	}
}

func TestInputsTheObjectCannotHold(t *testing.T) {
	dup := apitypes.Strategy{Strategy: strategy.Strategy{Name: "a", Class: class(strategy.High),
		Selectors: []strategy.Selector{{Key: "app", Value: "x"}, {Key: "app", Value: "y"}}}}
	_, err := toObject("ns", dup)
	var fe *strategy.FieldError
	if !errors.As(err, &fe) || fe.Field != "selectors[1].key" {
		t.Fatalf("duplicate selector key: %v", err)
	}
	if _, err := toObject("ns", apitypes.Strategy{Strategy: strategy.Strategy{Name: "a", Class: class(strategy.High), PID: 1 << 40}}); !errors.As(err, &fe) || fe.Field != "pid" {
		t.Fatalf("huge pid: %v", err)
	}
}

func TestObjectsTheAPICannotShow(t *testing.T) {
	base := func() *v1alpha1.SchedulingStrategy {
		return &v1alpha1.SchedulingStrategy{ObjectMeta: metav1.ObjectMeta{Name: "s"},
			Spec: v1alpha1.SchedulingStrategySpec{Class: "high", CommandRegex: "x"}}
	}
	cases := []struct {
		name, reason string
		edit         func(o *v1alpha1.SchedulingStrategy)
	}{
		{"pod expressions", "spec.podSelector.matchExpressions", func(o *v1alpha1.SchedulingStrategy) {
			o.Spec.PodSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpExists}}}
		}},
		{"every pod", "spec.podSelector is {}", func(o *v1alpha1.SchedulingStrategy) { o.Spec.PodSelector = &metav1.LabelSelector{} }},
		{"namespace labels", "spec.namespaceSelector", func(o *v1alpha1.SchedulingStrategy) {
			o.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
			o.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": "ran"}}
		}},
		{"namespace NotIn", "spec.namespaceSelector", func(o *v1alpha1.SchedulingStrategy) {
			o.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
			o.Spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: namespaceLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a"}}}}
		}},
		{"bad RE2", "command_regex", func(o *v1alpha1.SchedulingStrategy) { o.Spec.CommandRegex = `(\1)` }},
		{"long name", "name", func(o *v1alpha1.SchedulingStrategy) { o.Name = strings.Repeat("a", 64) }},
		{"bad precedence", AnnotationCreatedRevision, func(o *v1alpha1.SchedulingStrategy) {
			o.Annotations = map[string]string{AnnotationCreatedRevision: "soon"}
		}},
	}
	if _, err := fromObject(base()); err != nil {
		t.Fatalf("base object: %v", err)
	}
	for _, tc := range cases {
		o := base()
		tc.edit(o)
		if _, err := fromObject(o); err == nil || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: %v, want an error about %s", tc.name, err, tc.reason)
		}
	}
	// The one-namespace matchLabels form is the same as In [name].
	o := base()
	o.Spec.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}
	o.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{namespaceLabel: "oai"}}
	if s, err := fromObject(o); err != nil || len(s.Namespaces) != 1 || s.Namespaces[0] != "oai" {
		t.Fatalf("namespace matchLabels: %+v %v", s.Namespaces, err)
	}
}

func TestInvalidBecomesFieldError(t *testing.T) {
	gk := schema.GroupKind{Group: "swiftlane.io", Kind: "SchedulingStrategy"}
	cases := []struct {
		path, msg, prefix string
		want              string
	}{
		{"spec.commandRegex", "Too long: may not be more than 1024 bytes", "", "command_regex"},
		{"spec.slice", "slice must be between 50us and 1s", "", "execution_time"},
		{"spec.podSelector.matchLabels[app]", "bad", "strategies[3].", "strategies[3].selectors"},
		{"metadata.name", `a lowercase RFC 1123 subdomain must consist of ...`, "", "name"},
		{"spec", `namespaceSelector needs podSelector (use podSelector: {} for every pod)`, "", "namespaces"},
		{"metadata.annotations", "too long", "", ""},
	}
	for _, tc := range cases {
		err := apierrors.NewInvalid(gk, "s", field.ErrorList{field.Invalid(field.NewPath(tc.path), "v", tc.msg)})
		fe, ok := invalidToField(err, tc.prefix)
		if !ok || fe.Field != tc.want || fe.Msg == "" {
			t.Errorf("%s: %+v %v, want field %q", tc.path, fe, ok, tc.want)
		}
	}
	if _, ok := invalidToField(apierrors.NewConflict(schema.GroupResource{}, "s", errors.New("x")), ""); ok {
		t.Error("a conflict became a field error")
	}
}

func TestWorkloadsAreCapped(t *testing.T) {
	ws := make([]apitypes.Workload, crdconv.MaxWorkloads+10)
	for i := range ws {
		ws[i] = apitypes.Workload{PID: i + 1, Strategy: "s", Class: "critical", Cmdline: strings.Repeat("é", maxCmdlineBytes)}
	}
	out := workloadsOf(ws)
	if len(out) != crdconv.MaxWorkloads || out[0].PID != 1 {
		t.Fatalf("%d workloads, first %d", len(out), out[0].PID)
	}
	if c := out[0].Cmdline; len(c) > maxCmdlineBytes || !utf8.ValidString(c) {
		t.Fatalf("cmdline of %d bytes, valid UTF-8 %v", len(c), utf8.ValidString(c))
	}
	n := nodeFromObject(&v1alpha1.SchedulingNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1alpha1.SchedulingNodeStatus{
		Mode: "observe", HeartbeatSeconds: 5, RegisteredAt: metav1.NewTime(time.Unix(100, 0)), AppliedRevision: 42, Workloads: out[:1],
	}}, nil)
	if n.Name != "n1" || n.AppliedRevision != 42 || n.HeartbeatSeconds != 5 || len(n.Workloads) != 1 || !n.LastHeartbeat.IsZero() {
		t.Fatalf("node: %+v", n)
	}
}

// TestWorkloadPodFields: the pod and container of a workload survive the
// SchedulingNode status (pod as namespace/name, as the kubeagent writes it).
func TestWorkloadPodFields(t *testing.T) {
	in := apitypes.Workload{PID: 7, Strategy: "s", Class: "high", Cmdline: "x", PodName: "gnb-0", Namespace: "ran",
		PodUID: "0b7d5a2c-1f3e-4c5d-9a8b-7c6d5e4f3a2b", Container: "gnb", ContainerID: "4f3c2b1a"}
	out := workloadsOf([]apitypes.Workload{in})
	if out[0].Pod != "ran/gnb-0" || out[0].PodUID != in.PodUID || out[0].Container != "gnb" || out[0].ContainerID != "4f3c2b1a" {
		t.Fatalf("status workload: %+v", out[0])
	}
	n := nodeFromObject(&v1alpha1.SchedulingNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1alpha1.SchedulingNodeStatus{Workloads: out}}, nil)
	if n.Workloads[0] != in {
		t.Fatalf("round trip: %+v, want %+v", n.Workloads[0], in)
	}
}

// TestCarriersRoundTrip: automatic mode's carriers survive the
// SchedulingNode status, to the microsecond (MicroTime) and the whole packet
// per second. (Through JSON and a real apiserver: internal/api's restart test.)
func TestCarriersRoundTrip(t *testing.T) {
	at := time.Date(2026, 11, 26, 10, 0, 0, 123456000, time.UTC)
	in := apitypes.Carrier{PID: 7, Command: "nr-gnb", Class: "critical", Function: "gtp_encap_recv", Since: at, LastPacket: at.Add(time.Second),
		Packets: 12345, PacketsPerSecond: 99.6}
	out := crdconv.Carriers([]apitypes.Carrier{in})
	n := nodeFromObject(&v1alpha1.SchedulingNode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1alpha1.SchedulingNodeStatus{Carriers: out}}, nil)
	want := in
	want.PacketsPerSecond = 100
	if len(n.Carriers) != 1 || n.Carriers[0] != want {
		t.Fatalf("round trip: %+v, want %+v", n.Carriers, want)
	}
	many := make([]apitypes.Carrier, crdconv.MaxCarriers+1)
	if got := len(crdconv.Carriers(many)); got != crdconv.MaxCarriers {
		t.Fatalf("%d carriers in the status, want the cap %d", got, crdconv.MaxCarriers)
	}
}

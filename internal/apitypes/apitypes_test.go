// SPDX-License-Identifier: Apache-2.0

package apitypes

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

// TestWireShapes pins the JSON of the types clients and agents exchange:
// field names, omitempty and embedding are the API, so a change here is a
// change for every client.
func TestWireShapes(t *testing.T) {
	high, yes := strategy.High, true
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		v    any
		want string
	}{
		{Strategy{}, `{}`},
		{Strategy{Strategy: strategy.Strategy{Name: "a", Class: &high, Priority: &yes, ExecutionTime: 60000, CommandRegex: "x", PID: 3, CgroupPath: "/a", Inherit: true,
			Selectors: []strategy.Selector{{Key: "app", Value: "v"}}}, Namespaces: []string{"ns"}, NodeSelector: map[string]string{"z": "a"}, Revision: 4, CreatedRevision: 2, Owner: "op"},
			`{"name":"a","class":"high","priority":true,"execution_time":60000,"command_regex":"x","pid":3,"cgroup_path":"/a","inherit":true,"selectors":[{"key":"app","value":"v"}],"namespaces":["ns"],"node_selector":{"z":"a"},"revision":4,"created_revision":2,"owner":"op"}`},
		{Node{}, `{"name":"","version":"","kernel":"","mode":"","heartbeat_seconds":0,"scheduler_state":"","applied_revision":0,"workloads":null,"registered_at":"0001-01-01T00:00:00Z","last_heartbeat":"0001-01-01T00:00:00Z","healthy":false}`},
		{Node{Name: "n1",
			Registration: Registration{Labels: map[string]string{"a": "b"}, Version: "v", Kernel: "k", Mode: "observe", Reason: "r", HeartbeatSeconds: 5},
			Heartbeat: Heartbeat{SchedulerState: "enabled", AppliedRevision: 4,
				Counters: &Counters{Enqueued: map[string]uint64{"high": 1}, Dispatched: map[string]uint64{"direct": 2}, PreemptKicks: 1, WakeupPreempts: 2,
					CriticalDemoted: 3, StarvationRescues: 4, EventsDropped: 5, RunqueueWait: map[string]WaitHistogram{"high": {Count: 1, SumNs: 2, Buckets: []uint64{1, 2}}}},
				Workloads: []Workload{{PID: 1, Strategy: "a", Class: "high", Inherited: true, Cmdline: "x", PodName: "p", Namespace: "n", PodUID: "u", Container: "c", ContainerID: "i"}}},
			RegisteredAt: at, LastHeartbeat: at.Add(time.Second), Healthy: true},
			`{"name":"n1","labels":{"a":"b"},"version":"v","kernel":"k","mode":"observe","reason":"r","heartbeat_seconds":5,"scheduler_state":"enabled","applied_revision":4,` +
				`"counters":{"enqueued":{"high":1},"dispatched":{"direct":2},"preempt_kicks":1,"wakeup_preempts":2,"critical_demoted":3,"starvation_rescues":4,"events_dropped":5,"runqueue_wait":{"high":{"count":1,"sum_ns":2,"buckets":[1,2]}}},` +
				`"workloads":[{"pid":1,"strategy":"a","class":"high","inherited":true,"cmdline":"x","pod_name":"p","namespace":"n","pod_uid":"u","container":"c","container_id":"i"}],` +
				`"registered_at":"2026-01-02T03:04:05Z","last_heartbeat":"2026-01-02T03:04:06Z","healthy":true}`},
		{Workload{}, `{"pid":0,"strategy":"","class":"","cmdline":""}`},
	} {
		got, err := json.Marshal(tc.v)
		if err != nil || string(got) != tc.want {
			t.Errorf("%T:\n got %s %v\nwant %s", tc.v, got, err, tc.want)
		}
	}
}

func TestStrategyValidate(t *testing.T) {
	high := strategy.High
	ok := Strategy{Strategy: strategy.Strategy{Name: "a", Class: &high, CommandRegex: "x"}}
	for _, tc := range []struct {
		edit  func(*Strategy)
		field string // "" : valid
	}{
		{func(*Strategy) {}, ""},
		{func(s *Strategy) { s.Name = "" }, "name"},
		{func(s *Strategy) { s.Namespaces = []string{"ran", "Not_A_Label"} }, "namespaces[1]"},
		{func(s *Strategy) { s.NodeSelector = map[string]string{"": "x"} }, "node_selector"},
		{func(s *Strategy) { s.PID = -1 }, "pid"},
	} {
		s := ok
		tc.edit(&s)
		err := s.Validate()
		var fe *strategy.FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: %v", s, err)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("%+v: %v, want a FieldError for %s", s, err, tc.field)
		}
	}
}

func TestForNodeAndPrecedence(t *testing.T) {
	s := Strategy{NodeSelector: map[string]string{"zone": "a"}}
	if !s.ForNode(map[string]string{"zone": "a", "x": "y"}) || s.ForNode(map[string]string{"zone": "b"}) || s.ForNode(nil) {
		t.Error("ForNode: all selector labels must match")
	}
	if !(&Strategy{}).ForNode(nil) {
		t.Error("ForNode: no selector is every node")
	}
	named := func(n string, rev uint64) Strategy {
		return Strategy{Strategy: strategy.Strategy{Name: n}, CreatedRevision: rev}
	}
	list := []Strategy{named("c", 3), named("b", 1), named("a", 3)}
	SortByPrecedence(list)
	if list[0].Name != "b" || list[1].Name != "a" || list[2].Name != "c" {
		t.Errorf("precedence: %v %v %v", list[0].Name, list[1].Name, list[2].Name)
	}
}

func TestNodeHealth(t *testing.T) {
	reg := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := Node{Registration: Registration{HeartbeatSeconds: 5}, RegisteredAt: reg}
	if !n.IsHealthy(reg.Add(15*time.Second)) || n.IsHealthy(reg.Add(16*time.Second)) {
		t.Error("without heartbeats: healthy for three periods after registering")
	}
	n.LastHeartbeat = reg.Add(time.Minute)
	if !n.IsHealthy(reg.Add(time.Minute+15*time.Second)) || n.IsHealthy(reg.Add(time.Minute+16*time.Second)) {
		t.Error("healthy for three periods after the last heartbeat")
	}
}

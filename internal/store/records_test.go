// SPDX-License-Identifier: Apache-2.0

package store

import "testing"

// TestRecordsReadAndWriteTheFileFormat: records as the bolt file holds them
// (these were written by the release before the records had their own
// types) decode and encode back to the same bytes.
func TestRecordsReadAndWriteTheFileFormat(t *testing.T) {
	strategies := []string{
		`{"name":"full","class":"high","priority":true,"execution_time":60000,"command_regex":"x","pid":3,"cgroup_path":"/a","inherit":true,"selectors":[{"key":"app","value":"v"}],"namespaces":["ns"],"node_selector":{"z":"a"},"revision":2,"created_revision":2}`,
		`{"name":"c","class":"critical","command_regex":"q","revision":6,"created_revision":6,"owner":"op"}`,
	}
	roundTrip(t, strategies, decodeStrategy, encodeStrategy)
	changes := []string{
		`{"revision":5,"type":"delete","name":"b"}`,
		`{"revision":6,"type":"put","name":"c","strategy":{"name":"c","class":"critical","command_regex":"q","revision":6,"created_revision":6,"owner":"op"}}`,
	}
	roundTrip(t, changes, decodeChange, encodeChange)
	nodes := []string{
		`{"name":"n1","labels":{"a":"b"},"version":"v","kernel":"k","mode":"observe","reason":"r","heartbeat_seconds":5,"scheduler_state":"enabled","applied_revision":4,` +
			`"counters":{"enqueued":{"high":1},"dispatched":{"direct":2},"preempt_kicks":1,"wakeup_preempts":2,"critical_demoted":3,"starvation_rescues":4,"events_dropped":5,"runqueue_wait":{"high":{"count":1,"sum_ns":2,"buckets":[1,2]}}},` +
			`"workloads":[{"pid":1,"strategy":"a","class":"high","inherited":true,"cmdline":"x","pod_name":"p","namespace":"n","pod_uid":"u","container":"c","container_id":"i"}],` +
			`"registered_at":"2023-11-14T22:13:20.000000005Z","last_heartbeat":"2023-11-14T22:13:21.000000005Z","healthy":false}`,
		`{"name":"n2","version":"","kernel":"","mode":"schedule","heartbeat_seconds":5,"scheduler_state":"","applied_revision":0,"workloads":null,"registered_at":"2023-11-14T22:13:20.000000005Z","last_heartbeat":"0001-01-01T00:00:00Z","healthy":false}`,
	}
	roundTrip(t, nodes, decodeNode, encodeNode)
}

func roundTrip[T any](t *testing.T, records []string, decode func([]byte) (T, error), encode func(T) ([]byte, error)) {
	t.Helper()
	for _, rec := range records {
		v, err := decode([]byte(rec))
		if err != nil {
			t.Fatalf("%s: %v", rec, err)
		}
		if out, err := encode(v); err != nil || string(out) != rec {
			t.Errorf("%T:\n got %s %v\nwant %s", v, out, err, rec)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package floor

import (
	"testing"

	"github.com/cilium/ebpf"
)

// The floor stands for sched_ext without a policy only while its object
// holds no program: one callback would put BPF back on the measured path.
func TestFloorHasNoCallbacks(t *testing.T) {
	spec, err := loadFloor()
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Programs) != 0 {
		t.Errorf("the floor object has %d programs, want none", len(spec.Programs))
	}
	ops, ok := spec.Maps["floor_ops"]
	if !ok || ops.Type != ebpf.StructOpsMap {
		t.Fatalf("want a struct_ops map floor_ops, have %v", spec.Maps)
	}
}

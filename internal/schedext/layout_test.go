// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"
)

// The check itself, on hand-made C structs (the schedulers' tests run it on
// their real objects).
func TestSameLayoutCatchesDrift(t *testing.T) {
	u32 := &btf.Int{Name: "__u32", Size: 4}
	u64 := &btf.Int{Name: "__u64", Size: 8}
	event := func(ppid btf.Type, size uint32) *btf.Struct {
		return &btf.Struct{Name: "swl_event", Size: size, Members: []btf.Member{
			{Name: "type", Type: u32, Offset: 0},
			{Name: "pid", Type: u32, Offset: 32},
			{Name: "tgid", Type: u32, Offset: 64},
			{Name: "ppid", Type: ppid, Offset: 96},
		}}
	}
	goType := reflect.TypeFor[intfSwlEvent]()
	if err := sameLayout(event(u32, 16), goType); err != nil {
		t.Fatalf("matching layout: %v", err)
	}
	if err := sameLayout(event(u64, 24), goType); err == nil || !strings.Contains(err.Error(), "24 bytes") {
		t.Fatalf("grown struct: %v", err)
	}
	widened := event(u32, 16)
	widened.Members[3].Type = u64 // same size overall, wrong member
	if err := sameLayout(widened, goType); err == nil || !strings.Contains(err.Error(), "swl_event.ppid") {
		t.Fatalf("widened member: %v", err)
	}
}

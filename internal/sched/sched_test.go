// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/swiftlane/swiftlane/internal/schedext"
)

type ebpfSpec = ebpf.CollectionSpec

func specV1() (*ebpfSpec, error) { return loadSwiftlane() }
func specV2() (*ebpfSpec, error) { return loadSwiftlaneV2() }
func specV3() (*ebpfSpec, error) { return loadSwiftlaneV3() }

// The Go types of the C structs must have the C layout in every object:
// swl_stats (bpf/swiftlane.h) here, and internal/schedext's types of the
// structs both schedulers share (intf.h).
func TestSharedStructLayout(t *testing.T) {
	for _, load := range []func() (*ebpfSpec, error){specV1, specV2, specV3} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		var st *btf.Struct
		if err := spec.Types.TypeByName("swl_stats", &st); err != nil {
			t.Fatalf("swl_stats: %v", err)
		}
		if goSize := binary.Size(swiftlaneSwlStats{}); int(st.Size) != goSize {
			t.Errorf("swl_stats: C size %d, Go size %d: run `make generate`", st.Size, goSize)
		}
		if err := schedext.CheckLayout(spec); err != nil {
			t.Error(err)
		}
	}
}

// Every API level's object declares the same maps, programs and variables,
// since one Go objects struct is assigned from all of them.
func TestObjectsAgree(t *testing.T) {
	v1, err := specV1()
	if err != nil {
		t.Fatal(err)
	}
	for _, load := range []func() (*ebpfSpec, error){specV2, specV3} {
		other, err := load()
		if err != nil {
			t.Fatal(err)
		}
		for name := range v1.Programs {
			if _, ok := other.Programs[name]; !ok {
				t.Errorf("program %s missing from another API level", name)
			}
		}
		for name := range v1.Maps {
			if _, ok := other.Maps[name]; !ok {
				t.Errorf("map %s missing from another API level", name)
			}
		}
	}
}

// On a kernel without sched_ext (this machine, CI) Load refuses with the
// kernel check's error (its wording is tested in internal/schedext).
func TestLoadRefusesWithoutSchedExt(t *testing.T) {
	if _, err := os.Stat(schedext.SysfsRoot); err == nil {
		t.Skip("this kernel has sched_ext; the VM lab tests cover attaching")
	}
	var ue *schedext.UnsupportedError
	if _, err := Load(Options{SliceNs: 2e6, SliceMinNs: 5e5}); !errors.As(err, &ue) || !errors.Is(err, schedext.ErrNoSchedExt) {
		t.Fatalf("Load() = %v, want ErrNoSchedExt", err)
	}
}

// OrOpsFlags must change the struct_ops value's flags member and nothing
// else, in every object (the VM tests see the kernel take it: bpftool shows
// the flag on the attached scheduler).
func TestOrOpsFlags(t *testing.T) {
	for _, load := range []func() (*ebpfSpec, error){specV1, specV2, specV3} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		ops := spec.Maps["swiftlane_ops"]
		before := append([]byte(nil), ops.Contents[0].Value.([]byte)...)
		if err := schedext.OrOpsFlags(spec, 1<<5); err != nil {
			t.Fatal(err)
		}
		after := ops.Contents[0].Value.([]byte)
		var st *btf.Struct
		if err := spec.Types.TypeByName("sched_ext_ops", &st); err != nil {
			t.Fatal(err)
		}
		off := -1
		for _, m := range st.Members {
			if m.Name == "flags" {
				off = int(m.Offset.Bytes())
			}
		}
		if off < 0 {
			t.Fatal("sched_ext_ops has no flags member")
		}
		if got := binary.LittleEndian.Uint64(after[off:]); got != binary.LittleEndian.Uint64(before[off:])|1<<5 {
			t.Errorf("flags = %#x after OR 0x20, was %#x", got, binary.LittleEndian.Uint64(before[off:]))
		}
		for i := range after {
			if (i < off || i >= off+8) && after[i] != before[i] {
				t.Fatalf("byte %d outside flags changed", i)
			}
		}
	}
}

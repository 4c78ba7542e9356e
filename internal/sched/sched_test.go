// SPDX-License-Identifier: Apache-2.0

package sched

import (
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

type ebpfSpec = ebpf.CollectionSpec

func specV1() (*ebpfSpec, error) { return loadSwiftlane() }
func specV2() (*ebpfSpec, error) { return loadSwiftlaneV2() }
func specV3() (*ebpfSpec, error) { return loadSwiftlaneV3() }

// The Go mirrors of bpf/intf.h must have the C layout in every object.
func TestSharedStructLayout(t *testing.T) {
	for _, load := range []func() (*ebpfSpec, error){specV1, specV2, specV3} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		for name, goSize := range map[string]int{
			"swl_stats":     binary.Size(swiftlaneSwlStats{}),
			"swl_event":     binary.Size(swiftlaneSwlEvent{}),
			"swl_strategy":  binary.Size(swiftlaneSwlStrategy{}),
			"swl_exit_info": binary.Size(swiftlaneSwlExitInfo{}),
		} {
			var st *btf.Struct
			if err := spec.Types.TypeByName(name, &st); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if int(st.Size) != goSize {
				t.Errorf("%s: C size %d, Go size %d: run `make generate`", name, st.Size, goSize)
			}
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

// On a kernel without sched_ext (this machine, CI) the refusal names the
// cause and the way out.
func TestCheckExplainsMissingSchedExt(t *testing.T) {
	if _, err := os.Stat(SysfsRoot); err == nil {
		t.Skip("this kernel has sched_ext; the VM lab tests cover attaching")
	}
	err := Check()
	var ue *UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, ErrNoSchedExt) {
		t.Fatalf("Check() = %v, want ErrNoSchedExt", err)
	}
	if !strings.Contains(err.Error(), "make demo") || !strings.Contains(err.Error(), "CONFIG_SCHED_CLASS_EXT") {
		t.Fatalf("refusal lacks a fix: %v", err)
	}
	if _, err := Load(Options{SliceNs: 2e6, SliceMinNs: 5e5}); !errors.Is(err, ErrNoSchedExt) {
		t.Fatalf("Load() = %v, want ErrNoSchedExt", err)
	}
}

func TestExitInfoWording(t *testing.T) {
	e := ExitInfo{Kind: ExitSysRq, Reason: "disabled by sysrq-S"}
	if got := e.String(); got != "disabled by sysrq-S (kind 67)" {
		t.Fatalf("%q", got)
	}
	e = ExitInfo{Kind: ExitErrorStall, ExitCode: ECodeActRestart, Reason: "runnable task stall", Message: "swapper[0] failed to run for 30s"}
	if !e.IsError() || !e.WantsRestart() || !strings.Contains(e.String(), "failed to run for 30s") {
		t.Fatalf("%q", e.String())
	}
}

func TestOutOfMemoryAtEnable(t *testing.T) {
	for _, c := range []struct {
		e    ExitInfo
		want bool
	}{
		{ExitInfo{Kind: ExitError, Reason: "runtime error", Message: "ops.init_task() failed (-12) for kworker/R-sync_[5]"}, true},
		{ExitInfo{Kind: ExitError, Message: "ops.init_task() failed (-22) for x[1]"}, false},
		{ExitInfo{Kind: ExitErrorStall, Message: "init_task() failed (-12)"}, false},
		{ExitInfo{Kind: ExitUnreg}, false},
	} {
		if got := c.e.OutOfMemoryAtEnable(); got != c.want {
			t.Errorf("%v: OutOfMemoryAtEnable %v, want %v", &c.e, got, c.want)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package percpu

import (
	"errors"
	"strings"
	"structs"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// counters has the shapes bpf2go generates: a layout marker, plain
// counters, arrays of them, a high-water mark.
type counters struct {
	_       structs.HostLayout
	Packets uint64
	Hist    [2][3]uint64
	Nested  struct{ A, B uint32 }
	MaxNs   uint64
	_       [4]byte
}

func TestAddSumsEveryCounterAndKeepsTheLargestMark(t *testing.T) {
	per := []counters{
		{Packets: 1, Hist: [2][3]uint64{{1, 2, 3}, {4, 5, 6}}, Nested: struct{ A, B uint32 }{1, 2}, MaxNs: 70},
		{Packets: 10, Hist: [2][3]uint64{{10, 20, 30}, {40, 50, 60}}, Nested: struct{ A, B uint32 }{10, 20}, MaxNs: 900},
		{Packets: 100, MaxNs: 5},
	}
	got, err := Add(per, "MaxNs")
	if err != nil {
		t.Fatal(err)
	}
	want := counters{Packets: 111, Hist: [2][3]uint64{{11, 22, 33}, {44, 55, 66}}, Nested: struct{ A, B uint32 }{11, 22}, MaxNs: 900}
	if got != want {
		t.Errorf("Add = %+v, want %+v", got, want)
	}
	if got, err := Add(per); err != nil || got.MaxNs != 975 {
		t.Errorf("without maxOf, MaxNs = %d (%v), want the sum 975", got.MaxNs, err)
	}
}

func TestAddRefusesWhatItCannotAdd(t *testing.T) {
	if _, err := Add([]counters{{}}, "Missing"); err == nil || !strings.Contains(err.Error(), "no integer field Missing") {
		t.Errorf("unknown maxOf field: %v", err)
	}
	type withString struct {
		N    uint64
		Name string
	}
	if _, err := Add([]withString{{}}); err == nil || !strings.Contains(err.Error(), "withString.Name is a string") {
		t.Errorf("a string field: %v", err)
	}
}

// Sum reads a real per-CPU array: one copy per possible CPU.
func TestSumReadsAPerCPUMap(t *testing.T) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if errors.Is(err, unix.EPERM) {
		t.Skipf("creating a BPF map needs CAP_BPF: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	n, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	per := make([]uint64, n)
	var want uint64
	for i := range per {
		per[i] = uint64(i + 1)
		want += per[i]
	}
	if err := m.Put(uint32(0), per); err != nil {
		t.Fatal(err)
	}
	if got, err := Sum[uint64](m, uint32(0)); err != nil || got != want {
		t.Errorf("Sum = %d, %v; want %d over %d CPUs", got, err, want, n)
	}
	if _, err := Sum[uint64](m, uint32(1)); err == nil {
		t.Error("a key beyond the array: no error")
	}
}

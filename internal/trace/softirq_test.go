// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"runtime"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"
)

// kernelBTF builds a kernel BTF with the given structs, each a list of
// int members (the probe reads only names and offsets).
func kernelBTF(t *testing.T, structs map[string][]string) *btf.Spec {
	t.Helper()
	i32 := &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	var types []btf.Type
	for name, members := range structs {
		s := &btf.Struct{Name: name, Size: uint32(4 * len(members))}
		for i, m := range members {
			s.Members = append(s.Members, btf.Member{Name: m, Type: i32, Offset: btf.Bits(32 * i)})
		}
		types = append(types, s)
	}
	b, err := btf.NewBuilder(types, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := b.Spec()
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

const kallsymsHead = `ffffffff81000000 T _stext
ffffffff83a1c940 R __per_cpu_offset
ffffffffc0a01000 t gtp_encap_recv	[gtp]
`

func TestFindSoftirqProbe(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the probe is x86-64's")
	}
	plain := map[string][]string{"task_struct": {"state", "flags"}}
	cases := []struct {
		name     string
		kallsyms string
		structs  map[string][]string
		want     softirqProbe
		err      string
	}{
		{
			name:     "per-CPU __preempt_count (6.15 and later)",
			kallsyms: kallsymsHead + "ffffffff83b2c00c D __preempt_count\n",
			structs:  plain,
			want:     softirqProbe{preemptCount: 0xffffffff83b2c00c, perCPUOffset: 0xffffffff83a1c940},
		},
		{
			name:     "pcpu_hot's member (earlier kernels, zero-based per-CPU)",
			kallsyms: kallsymsHead + "0000000000020c00 A pcpu_hot\n",
			structs:  map[string][]string{"task_struct": {"state"}, "pcpu_hot": {"current_task_lo", "current_task_hi", "preempt_count"}},
			want:     softirqProbe{preemptCount: 0x20c08, perCPUOffset: 0xffffffff83a1c940},
		},
		{
			name:     "a module's symbol of the same name does not count",
			kallsyms: kallsymsHead + "ffffffffc0a02000 d __preempt_count\t[evil]\n",
			structs:  plain,
			err:      "neither __preempt_count nor pcpu_hot",
		},
		{
			name:     "addresses hidden",
			kallsyms: "0000000000000000 R __per_cpu_offset\n0000000000000000 D __preempt_count\n",
			structs:  plain,
			err:      "no address for __per_cpu_offset",
		},
		{
			name:     "PREEMPT_RT",
			kallsyms: kallsymsHead + "ffffffff83b2c00c D __preempt_count\n",
			structs:  map[string][]string{"task_struct": {"state", "softirq_disable_cnt"}},
			err:      "PREEMPT_RT",
		},
		{
			name:     "pcpu_hot in kallsyms but not in BTF",
			kallsyms: kallsymsHead + "0000000000020c00 A pcpu_hot\n",
			structs:  plain,
			err:      "neither __preempt_count nor pcpu_hot",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := findSoftirqProbe(strings.NewReader(c.kallsyms), kernelBTF(t, c.structs))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("probe = %+v, want %+v", got, c.want)
			}
		})
	}
}

// SPDX-License-Identifier: Apache-2.0

package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/btf"
)

// softirqProbe is where the BPF programs read whether the CPU is serving a
// softirq: the per-CPU preempt count (its address before the CPU's per-CPU
// offset is added) and the __per_cpu_offset array. It sees every softirq
// (NET_TX as well as NET_RX) and costs two reads inside the traced functions
// only, no program of its own.
type softirqProbe struct {
	preemptCount uint64
	perCPUOffset uint64
}

// findSoftirqProbe locates the preempt count: x86-64 keeps it in the
// per-CPU variable __preempt_count (6.15 and later) or in the per-CPU struct
// pcpu_hot (earlier). On PREEMPT_RT a task's softirq state is its own
// (task_struct.softirq_disable_cnt), not the CPU's, so there is no probe.
func findSoftirqProbe(kallsyms io.Reader, kernel *btf.Spec) (softirqProbe, error) {
	if runtime.GOARCH != "amd64" {
		return softirqProbe{}, fmt.Errorf("the softirq probe knows x86-64's preempt count only, not %s's", runtime.GOARCH)
	}
	var task *btf.Struct
	if err := kernel.TypeByName("task_struct", &task); err != nil {
		return softirqProbe{}, fmt.Errorf("kernel BTF: %w", err)
	}
	for _, m := range task.Members {
		if m.Name == "softirq_disable_cnt" {
			return softirqProbe{}, errors.New("a PREEMPT_RT kernel keeps softirq state per task, not in the CPU's preempt count")
		}
	}
	syms, err := kernelSymbols(kallsyms, "__per_cpu_offset", "__preempt_count", "pcpu_hot")
	if err != nil {
		return softirqProbe{}, err
	}
	p := softirqProbe{perCPUOffset: syms["__per_cpu_offset"], preemptCount: syms["__preempt_count"]}
	if p.perCPUOffset == 0 {
		return softirqProbe{}, errors.New("/proc/kallsyms shows no address for __per_cpu_offset (not root, kernel.kptr_restrict = 2, or a kernel without CONFIG_KALLSYMS_ALL)")
	}
	if p.preemptCount != 0 {
		return p, nil
	}
	hot := syms["pcpu_hot"]
	var s *btf.Struct
	if hot == 0 || kernel.TypeByName("pcpu_hot", &s) != nil {
		return softirqProbe{}, errors.New("neither __preempt_count nor pcpu_hot is in /proc/kallsyms (a kernel without CONFIG_KALLSYMS_ALL lists no data symbols) and the kernel's BTF")
	}
	for _, m := range s.Members {
		if m.Name == "preempt_count" {
			p.preemptCount = hot + uint64(m.Offset.Bytes())
			return p, nil
		}
	}
	return softirqProbe{}, errors.New("the kernel's struct pcpu_hot has no preempt_count")
}

// kernelSymbols reads the addresses of names from /proc/kallsyms-formatted
// r ("address type name [module]"). A symbol that is absent, or shown as 0
// (addresses hidden from this reader), is left out of the map.
func kernelSymbols(r io.Reader, names ...string) (map[string]uint64, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	found := map[string]uint64{}
	sc := bufio.NewScanner(r)
	for sc.Scan() && len(found) < len(want) {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || len(f) > 3 || !want[f[2]] { // a fourth field: a module's symbol
			continue
		}
		addr, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("kallsyms: %q: %w", sc.Text(), err)
		}
		if addr != 0 {
			found[f[2]] = addr
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read kallsyms: %w", err)
	}
	return found, nil
}

// loadSoftirqProbe is findSoftirqProbe on the running kernel.
func loadSoftirqProbe(cache *btf.Cache) (softirqProbe, error) {
	kernel, err := cache.Kernel()
	if err != nil {
		return softirqProbe{}, fmt.Errorf("kernel BTF: %w", err)
	}
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return softirqProbe{}, err
	}
	defer f.Close()
	return findSoftirqProbe(f, kernel)
}

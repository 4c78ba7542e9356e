// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Objects are a scheduler's bpf2go loaders, one per API level: Objects[0]
// parses the level 1 object, Objects[2] the level 3 one.
type Objects [3]func() (*ebpf.CollectionSpec, error)

// Spec is a scheduler's object as picked for the running kernel, parsed
// and not loaded yet: the scheduler sets its constants and sizes its maps,
// then loads it with Load.
type Spec struct {
	*ebpf.CollectionSpec
	Level int        // the kfunc API level (APILevel)
	cache *btf.Cache // the kernel BTF decoded for the choice
}

// OpenSpec lifts the memlock limit, then picks and parses the object for
// the running kernel's API level (level 1 where the kernel has no BTF to
// tell).
func OpenSpec(objs Objects) (*Spec, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock limit: %w", err)
	}
	cache := btf.NewCache()
	level, err := APILevel(cache)
	if errors.Is(err, btf.ErrNotSupported) {
		level = 1
	} else if err != nil {
		return nil, fmt.Errorf("parse BPF object: %w", err)
	}
	spec, err := objs[level-1]()
	if err != nil {
		return nil, fmt.Errorf("parse BPF object: %w", err)
	}
	return &Spec{CollectionSpec: spec, Level: level, cache: cache}, nil
}

// SetConstants sets the object's const volatile globals, by name.
func (s *Spec) SetConstants(consts map[string]any) error {
	for name, v := range consts {
		if err := s.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	return nil
}

// Load loads the object into objs, a bpf2go objects struct, reusing
// the kernel BTF decoded for the choice (decoding it again is slow under
// TCG). When the verifier rejects the object, the error carries its log,
// naming the scheduler as what ("the scheduler").
func (s *Spec) Load(objs any, what string) error {
	err := s.CollectionSpec.LoadAndAssign(objs, &ebpf.CollectionOptions{Cache: s.cache})
	if err == nil {
		return nil
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("BPF verifier rejected %s: %+v", what, ve)
	}
	if errors.Is(err, unix.EPERM) {
		// cilium/ebpf suggests RLIMIT_MEMLOCK for any EPERM, but every
		// sched_ext kernel charges BPF memory to the cgroup: here the
		// cause is a capability the process lacks.
		return fmt.Errorf("load BPF scheduler: %w; the kernel refused a privileged load: run as root with CAP_BPF and CAP_PERFMON "+
			"(or CAP_SYS_ADMIN); in a pod, check that no securityContext or admission policy drops them", err)
	}
	return fmt.Errorf("load BPF scheduler: %w", err)
}

// SetOpsFlags ORs into the struct_ops map's flags each named member of the
// kernel's enum scx_ops_flags that the running kernel has, and returns the
// names it set. A flag the kernel lacks is skipped, not an error: the flags
// asked for here are optimisations, and a kernel refuses an ops value with
// a flag it does not know.
func (s *Spec) SetOpsFlags(names ...string) ([]string, error) {
	kernel, err := s.cache.Kernel()
	if err != nil {
		return nil, fmt.Errorf("read kernel BTF: %w", err)
	}
	var flags *btf.Enum
	if err := kernel.TypeByName("scx_ops_flags", &flags); err != nil {
		return nil, fmt.Errorf("kernel BTF: enum scx_ops_flags: %w", err)
	}
	var set []string
	var bits uint64
	for _, name := range names {
		for _, v := range flags.Values {
			if v.Name == name {
				bits |= v.Value
				set = append(set, name)
			}
		}
	}
	if bits == 0 {
		return nil, nil
	}
	return set, OrOpsFlags(s.CollectionSpec, bits)
}

// OrOpsFlags ORs bits into the u64 flags member of spec's one struct_ops
// map (its value as the object laid it out; cilium/ebpf copies it member by
// member into the kernel's layout at load).
func OrOpsFlags(spec *ebpf.CollectionSpec, bits uint64) error {
	for _, m := range spec.Maps {
		if m.Type != ebpf.StructOpsMap {
			continue
		}
		st, ok := m.Value.(*btf.Struct)
		if !ok || len(m.Contents) != 1 {
			return fmt.Errorf("struct_ops map %s: unexpected layout", m.Name)
		}
		data, ok := m.Contents[0].Value.([]byte)
		if !ok {
			return fmt.Errorf("struct_ops map %s: value is %T, not bytes", m.Name, m.Contents[0].Value)
		}
		for _, mem := range st.Members {
			if mem.Name != "flags" {
				continue
			}
			off := int(mem.Offset.Bytes())
			if size, err := btf.Sizeof(mem.Type); err != nil || size != 8 || off+8 > len(data) {
				return fmt.Errorf("struct_ops map %s: flags member is not a u64 inside the value", m.Name)
			}
			binary.LittleEndian.PutUint64(data[off:], binary.LittleEndian.Uint64(data[off:])|bits)
			return nil
		}
		return fmt.Errorf("struct_ops map %s: no flags member", m.Name)
	}
	return errors.New("object has no struct_ops map")
}

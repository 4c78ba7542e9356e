// SPDX-License-Identifier: Apache-2.0

package schedext

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// shared are this package's Go types of intf.h's structs (generated from
// bpf/intf.h, see gen.go), by C name.
var shared = []struct {
	name   string
	goType reflect.Type
}{
	{"swl_strategy", reflect.TypeFor[intfSwlStrategy]()},
	{"swl_event", reflect.TypeFor[intfSwlEvent]()},
	{"swl_exit_info", reflect.TypeFor[intfSwlExitInfo]()},
}

// CheckLayout compares this package's Go types of intf.h's structs with
// their C layout in a scheduler's object (its BTF): size, and each member's
// offset and size. Both are generated from the same intf.h, so they differ
// only when one was regenerated and the other not (go generate run on one
// package): a scheduler's tests run it on every object it embeds, so that
// fails there instead of misreading the maps.
func CheckLayout(spec *ebpf.CollectionSpec) error {
	var errs []error
	for _, m := range shared {
		var st *btf.Struct
		if err := spec.Types.TypeByName(m.name, &st); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.name, err))
			continue
		}
		errs = append(errs, sameLayout(st, m.goType))
	}
	return errors.Join(errs...)
}

func sameLayout(c *btf.Struct, g reflect.Type) error {
	var fields []reflect.StructField
	for i := range g.NumField() {
		if f := g.Field(i); f.Name != "_" { // structs.HostLayout
			fields = append(fields, f)
		}
	}
	if uintptr(c.Size) != g.Size() || len(c.Members) != len(fields) {
		return fmt.Errorf("%s: C has %d bytes in %d members, Go %d bytes in %d", c.Name, c.Size, len(c.Members), g.Size(), len(fields))
	}
	for i, m := range c.Members {
		size, err := btf.Sizeof(m.Type)
		if err != nil {
			return fmt.Errorf("%s.%s: %w", c.Name, m.Name, err)
		}
		f := fields[i]
		if uintptr(m.Offset.Bytes()) != f.Offset || uintptr(size) != f.Type.Size() || m.BitfieldSize != 0 {
			return fmt.Errorf("%s.%s: C has %d bytes at %d, Go's %s %d at %d", c.Name, m.Name, size, m.Offset.Bytes(), f.Name, f.Type.Size(), f.Offset)
		}
	}
	return nil
}

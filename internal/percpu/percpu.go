// SPDX-License-Identifier: Apache-2.0

// Package percpu adds up the copies of a BPF per-CPU value. Both schedulers
// and the load balancer count into per-CPU structs (no CPU waits for
// another's cache line) and read them through Sum, so a counter added on
// the BPF side is summed without a line of Go per field.
package percpu

import (
	"fmt"
	"reflect"

	"github.com/cilium/ebpf"
)

// Sum reads key from m, a per-CPU map, and adds the CPUs' copies up (Add).
func Sum[T any](m *ebpf.Map, key any, maxOf ...string) (T, error) {
	var per []T
	if err := m.Lookup(key, &per); err != nil {
		var zero T
		return zero, err
	}
	return Add(per, maxOf...)
}

// Add adds per-CPU copies up: every integer in T, also inside arrays and
// nested structs, is summed, except the top-level fields named in maxOf
// (high-water marks), which keep the largest copy. Unexported fields
// (padding, layout markers) are left zero. The error names a field Add
// cannot add or a maxOf name T lacks.
func Add[T any](per []T, maxOf ...string) (T, error) {
	var total T
	tv := reflect.ValueOf(&total).Elem()
	if err := check(tv.Type(), tv.Type().String()); err != nil {
		return total, err
	}
	isMax := map[string]bool{}
	for _, name := range maxOf {
		f, ok := tv.Type().FieldByName(name)
		if tv.Kind() != reflect.Struct || !ok || len(f.Index) != 1 || !isInt(f.Type.Kind()) {
			return total, fmt.Errorf("percpu: %s has no integer field %s to keep the largest of", tv.Type(), name)
		}
		isMax[name] = true
	}
	for i := range per {
		add(tv, reflect.ValueOf(&per[i]).Elem(), isMax)
	}
	return total, nil
}

// check refuses a type with anything but integers, arrays and structs of
// them in its exported fields; path names it in the error.
func check(t reflect.Type, path string) error {
	switch {
	case isInt(t.Kind()):
		return nil
	case t.Kind() == reflect.Array:
		return check(t.Elem(), path+"[]")
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				if err := check(f.Type, path+"."+f.Name); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return fmt.Errorf("percpu: %s is a %s: only integers, arrays and structs of them add up", path, t.Kind())
}

// add adds src to dst; at the top level, fields in isMax keep the larger.
func add(dst, src reflect.Value, isMax map[string]bool) {
	switch k := dst.Kind(); {
	case k >= reflect.Uint && k <= reflect.Uintptr:
		dst.SetUint(dst.Uint() + src.Uint())
	case k >= reflect.Int && k <= reflect.Int64:
		dst.SetInt(dst.Int() + src.Int())
	case k == reflect.Array:
		for i := range dst.Len() {
			add(dst.Index(i), src.Index(i), nil)
		}
	case k == reflect.Struct:
		t := dst.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			switch {
			case !f.IsExported():
			case isMax[f.Name]:
				larger(dst.Field(i), src.Field(i))
			default:
				add(dst.Field(i), src.Field(i), nil)
			}
		}
	}
}

func larger(dst, src reflect.Value) {
	if dst.CanUint() {
		dst.SetUint(max(dst.Uint(), src.Uint()))
	} else {
		dst.SetInt(max(dst.Int(), src.Int()))
	}
}

func isInt(k reflect.Kind) bool {
	return (k >= reflect.Int && k <= reflect.Int64) || (k >= reflect.Uint && k <= reflect.Uintptr)
}

// SPDX-License-Identifier: Apache-2.0

// Package schema holds the constraints of the control plane's JSON bodies
// in one place: types declare the rules of their fields (JSONRules), Check
// enforces them on every decoded request, and the API's OpenAPI generator
// writes the same rules into /openapi.json. A constraint therefore cannot be
// documented without being enforced, or enforced by Check without being
// documented. Cross-field rules that JSON Schema can only say with anyOf
// are declared with JSONAnyOf and checked by the types' Validate methods.
package schema

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"
)

// FieldError is a validation error naming the field (as in the body or the
// file, e.g. strategies[1].selectors[0].key) and, in Msg, the fix.
type FieldError struct {
	Field string
	Line  int // in the file the value came from; 0 when unknown or not from a file
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", e.Field, e.Line, e.Msg)
	}
	return e.Field + ": " + e.Msg
}

// Rule constrains one JSON field. Zero values mean "no constraint".
type Rule struct {
	// Required: a request must carry the field (checked by the type's
	// Validate, since presence is not visible after decoding).
	Required bool
	// MinLength and MaxLength bound a string's length in characters.
	MinLength, MaxLength int
	// Pattern is a regular expression the whole string must match, written
	// so that RE2 and ECMA-262 (JSON Schema) read it the same way.
	Pattern string
	// Enum lists the allowed strings.
	Enum []string
	// Min and Max bound a number (integer or float); Exclude is a range
	// inside them that is refused (e.g. "0, or 50000 and up"), integers only.
	Min, Max *int64
	Exclude  *[2]int64
	// MinItems and MaxItems bound an array.
	MinItems, MaxItems int
	// NoEmptyKey refuses the key "" in an object.
	NoEmptyKey bool
	// Items constrains each element of an array or value of an object.
	Items *Rule
	// Format is the JSON Schema format (documentation; e.g. "regex").
	Format string
	// Doc is the field's description, and what error messages suggest.
	Doc string
	// Ignored marks a field a request may carry but the server sets
	// (revisions): documented as such, never refused.
	Ignored bool
}

// Rules are a type's field rules by JSON name.
type Rules map[string]Rule

// Constrained types declare their fields' rules.
type Constrained interface{ JSONRules() Rules }

// Combined types declare cross-field rules as JSON Schema anyOf branches
// (documentation; their Validate enforces them).
type Combined interface{ JSONAllOf() []map[string]any }

// Int64 is a helper for Rule.Min and Rule.Max.
func Int64(v int64) *int64 { return &v }

var (
	reMu    sync.Mutex
	reCache = map[string]*regexp.Regexp{}
)

// Regexp compiles a rule's pattern once.
func Regexp(p string) *regexp.Regexp {
	reMu.Lock()
	defer reMu.Unlock()
	re, ok := reCache[p]
	if !ok {
		re = regexp.MustCompile(p)
		reCache[p] = re
	}
	return re
}

// Field is one JSON field of a struct, embedded structs flattened the way
// encoding/json does (the shallower field wins).
type Field struct {
	Name      string
	Index     []int
	Type      reflect.Type
	OmitEmpty bool
	Rule      Rule
	HasRule   bool
}

var (
	constrained = reflect.TypeOf((*Constrained)(nil)).Elem()
	fieldsCache sync.Map // reflect.Type -> []Field
)

// Fields lists t's JSON fields with their rules, in declaration order.
func Fields(t reflect.Type) []Field {
	if v, ok := fieldsCache.Load(t); ok {
		return v.([]Field)
	}
	type cand struct {
		f     Field
		depth int
	}
	byName := map[string]cand{}
	var order []string
	var walk func(t reflect.Type, index []int, depth int)
	walk = func(t reflect.Type, index []int, depth int) {
		var rules Rules
		if t.Implements(constrained) {
			rules = reflect.Zero(t).Interface().(Constrained).JSONRules()
		}
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" || (!sf.IsExported() && !sf.Anonymous) {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			idx := append(append([]int(nil), index...), i)
			if sf.Anonymous && name == "" {
				ft := sf.Type
				for ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					walk(ft, idx, depth+1)
					continue
				}
			}
			if name == "" {
				name = sf.Name
			}
			r, has := rules[name]
			f := Field{Name: name, Index: idx, Type: sf.Type, OmitEmpty: strings.Contains(opts, "omitempty"), Rule: r, HasRule: has}
			if c, ok := byName[name]; ok {
				if c.depth <= depth {
					continue
				}
			} else {
				order = append(order, name)
			}
			byName[name] = cand{f, depth}
		}
	}
	walk(t, nil, 0)
	out := make([]Field, 0, len(order))
	for _, n := range order {
		out = append(out, byName[n].f)
	}
	fieldsCache.Store(t, out)
	return out
}

// Check enforces every declared rule (except Required) on a decoded value,
// walking nested structs, slices and maps. The error is a *FieldError.
func Check(v any) error {
	return check(reflect.ValueOf(v), "", nil)
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

func check(v reflect.Value, at string, r *Rule) error {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if r != nil && !r.Ignored {
		if err := r.check(v, at); err != nil {
			return err
		}
	}
	switch v.Kind() {
	case reflect.Struct:
		for _, f := range Fields(v.Type()) {
			fv := v.FieldByIndex(f.Index)
			var fr *Rule
			if f.HasRule {
				fr = &f.Rule
			}
			if err := check(fv, join(at, f.Name), fr); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		var ir *Rule
		if r != nil {
			ir = r.Items
		}
		for i := 0; i < v.Len(); i++ {
			if err := check(v.Index(i), fmt.Sprintf("%s[%d]", at, i), ir); err != nil {
				return err
			}
		}
	case reflect.Map:
		var ir *Rule
		if r != nil {
			ir = r.Items
		}
		it := v.MapRange()
		for it.Next() {
			if err := check(it.Value(), join(at, fmt.Sprint(it.Key().Interface())), ir); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *Rule) fix() string {
	if r.Doc != "" {
		return ": " + r.Doc
	}
	return ""
}

func (r *Rule) check(v reflect.Value, at string) error {
	bad := func(format string, args ...any) error {
		return &FieldError{Field: at, Msg: fmt.Sprintf(format, args...)}
	}
	switch v.Kind() {
	case reflect.String:
		s := v.String()
		n := len([]rune(s))
		if r.MinLength > 0 && n < r.MinLength {
			if n == 0 {
				return bad("missing or empty%s", r.fix())
			}
			return bad("%q is shorter than %d characters%s", s, r.MinLength, r.fix())
		}
		if r.MaxLength > 0 && n > r.MaxLength {
			return bad("longer than %d characters%s", r.MaxLength, r.fix())
		}
		if len(r.Enum) > 0 {
			ok := false
			for _, e := range r.Enum {
				ok = ok || e == s
			}
			if !ok {
				return bad("%q is unknown: use one of %s", s, strings.Join(r.Enum, ", "))
			}
		}
		if r.Pattern != "" && !Regexp(r.Pattern).MatchString(s) {
			return bad("%q is not valid%s", s, r.fix())
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		var n int64
		big := false
		if v.CanInt() {
			n = v.Int()
		} else if u := v.Uint(); u > 1<<63-1 {
			big = true
		} else {
			n = int64(u)
		}
		if (r.Min != nil && !big && n < *r.Min) || (r.Max != nil && (big || n > *r.Max)) ||
			(r.Exclude != nil && !big && n >= r.Exclude[0] && n <= r.Exclude[1]) {
			return bad("%v is out of range: use %s", v.Interface(), r.Range())
		}
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if (r.Min != nil && f < float64(*r.Min)) || (r.Max != nil && f > float64(*r.Max)) {
			return bad("%v is out of range: use %s", f, r.Range())
		}
	case reflect.Slice, reflect.Array:
		if r.MinItems > 0 && v.Len() < r.MinItems {
			return bad("needs at least %d entries%s", r.MinItems, r.fix())
		}
		if r.MaxItems > 0 && v.Len() > r.MaxItems {
			return bad("%d entries: send at most %d", v.Len(), r.MaxItems)
		}
	case reflect.Map:
		if r.NoEmptyKey && v.Len() > 0 && v.MapIndex(reflect.Zero(v.Type().Key())).IsValid() {
			return bad("empty key%s", r.fix())
		}
	}
	return nil
}

// Range describes a number rule's allowed values, e.g. "0, or 60..157680000".
func (r *Rule) Range() string {
	lo, hi := "", ""
	if r.Min != nil {
		lo = fmt.Sprint(*r.Min)
	}
	if r.Max != nil {
		hi = fmt.Sprint(*r.Max)
	}
	s := lo + ".." + hi
	if r.Exclude != nil && r.Min != nil && r.Exclude[0] == *r.Min+1 {
		s = fmt.Sprintf("%d, or %d..%s", *r.Min, r.Exclude[1]+1, hi)
	}
	if r.Doc != "" {
		s += " (" + r.Doc + ")"
	}
	return s
}

var (
	jsonUnmarshaler = reflect.TypeOf((*interface{ UnmarshalJSON([]byte) error })(nil)).Elem()
	textUnmarshaler = reflect.TypeOf((*interface{ UnmarshalText([]byte) error })(nil)).Elem()
)

// Strict checks a JSON document, decoded into any, against the fields of
// type t before it is decoded into t: it refuses null (encoding/json would
// take it as "absent") and object keys t does not have, compared exactly
// (encoding/json matches them case-insensitively). The error is a
// *FieldError naming the field.
func Strict(doc any, t reflect.Type) error { return strict(doc, t, "", false) }

// Nullable reports whether JSON null is accepted for a field: where Go's
// encoder writes null itself (a nil slice, map or pointer not marked
// omitempty), so the server's own clients send it.
func Nullable(t reflect.Type, omitEmpty bool) bool {
	k := t.Kind()
	return !omitEmpty && (k == reflect.Slice || k == reflect.Map || k == reflect.Pointer)
}

func strict(doc any, t reflect.Type, at string, nullable bool) error {
	if doc == nil {
		if nullable {
			return nil
		}
		if at == "" {
			return &FieldError{Msg: "the body is null: send a JSON object"}
		}
		return &FieldError{Field: at, Msg: "null: leave the field out instead"}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil // decodes itself (classes, times)
	}
	switch d := doc.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Struct:
			known := map[string]Field{}
			for _, f := range Fields(t) {
				known[f.Name] = f
			}
			for k, v := range d {
				f, ok := known[k]
				if !ok {
					return &FieldError{Field: join(at, k), Msg: "unknown field: remove it; /openapi.json lists the known fields"}
				}
				if err := strict(v, f.Type, join(at, k), Nullable(f.Type, f.OmitEmpty) && !f.Rule.Required); err != nil {
					return err
				}
			}
		case reflect.Map:
			for k, v := range d {
				if err := strict(v, t.Elem(), join(at, k), Nullable(t.Elem(), false)); err != nil {
					return err
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, v := range d {
				if err := strict(v, t.Elem(), fmt.Sprintf("%s[%d]", at, i), Nullable(t.Elem(), false)); err != nil {
					return err
				}
			}
		}
	}
	return nil // type mismatches are the typed decoder's to report
}

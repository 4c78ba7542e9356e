// SPDX-License-Identifier: Apache-2.0

package schema

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

type inner struct {
	Key   string `json:"key"`
	Slice uint64 `json:"slice,omitempty"`
}

func (inner) JSONRules() Rules {
	return Rules{
		"key":   {MinLength: 1, Pattern: `^[a-z]+$`, Doc: "use lower-case letters"},
		"slice": {Min: Int64(0), Max: Int64(100), Exclude: &[2]int64{1, 9}},
	}
}

type outer struct {
	inner
	Slice uint64            `json:"slice,omitempty"` // shadows inner's: no rule
	Items []inner           `json:"items"`
	Tags  map[string]string `json:"tags,omitempty"`
	Mode  string            `json:"mode"`
}

func (outer) JSONRules() Rules {
	return Rules{"mode": {Enum: []string{"a", "b"}}, "tags": {NoEmptyKey: true}, "items": {MaxItems: 2}}
}

func TestCheckNamesTheField(t *testing.T) {
	ok := outer{inner: inner{Key: "x"}, Slice: 5, Mode: "a", Items: []inner{{Key: "y", Slice: 10}}}
	if err := Check(&ok); err != nil {
		t.Fatalf("valid value refused: %v", err)
	}
	for _, tc := range []struct {
		mutate func(*outer)
		field  string
	}{
		{func(o *outer) { o.Key = "" }, "key"},
		{func(o *outer) { o.Key = "X" }, "key"},
		{func(o *outer) { o.Mode = "c" }, "mode"},
		{func(o *outer) { o.Items[0].Slice = 5 }, "items[0].slice"},
		{func(o *outer) { o.Items[0].Slice = 101 }, "items[0].slice"},
		{func(o *outer) { o.Items = append(o.Items, inner{Key: "a"}, inner{Key: "b"}) }, "items"},
		{func(o *outer) { o.Tags = map[string]string{"": "x"} }, "tags"},
	} {
		v := ok
		v.Items = append([]inner(nil), ok.Items...)
		tc.mutate(&v)
		var fe *FieldError
		if err := Check(&v); !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("want an error on %s, got %v", tc.field, err)
		}
	}
}

func TestStrictRefusesNullAndUnknownKeys(t *testing.T) {
	typ := reflect.TypeOf(outer{})
	for _, tc := range []struct{ doc, field string }{
		{`{"key":"x","mode":"a","items":null}`, ""}, // items: a nil slice Go writes as null
		{`{"key":null}`, "key"},
		{`{"Key":"x"}`, "Key"},
		{`{"items":[{"key":"x","nope":1}]}`, "items[0].nope"},
		{`null`, ""},
	} {
		var doc any
		if err := json.Unmarshal([]byte(tc.doc), &doc); err != nil {
			t.Fatal(err)
		}
		err := Strict(doc, typ)
		var fe *FieldError
		switch {
		case tc.doc == `null`:
			if !errors.As(err, &fe) {
				t.Errorf("%s: accepted", tc.doc)
			}
		case tc.field == "":
			if err != nil {
				t.Errorf("%s: %v", tc.doc, err)
			}
		case !errors.As(err, &fe) || fe.Field != tc.field:
			t.Errorf("%s: want an error on %s, got %v", tc.doc, tc.field, err)
		}
	}
	if f := Fields(typ); len(f) != 5 || f[1].Name != "slice" || f[1].HasRule {
		t.Errorf("fields (the outer slice shadows the inner one): %+v", f)
	}
}

type rated struct {
	Rate float64 `json:"rate"`
}

func (rated) JSONRules() Rules { return Rules{"rate": {Min: Int64(0), Max: Int64(1000)}} }

// Min and Max bound floats as well as integers.
func TestCheckBoundsFloats(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		ok   bool
	}{{0, true}, {999.5, true}, {1000, true}, {-0.5, false}, {1000.5, false}} {
		err := Check(&rated{Rate: tc.rate})
		var fe *FieldError
		if tc.ok != (err == nil) || (err != nil && (!errors.As(err, &fe) || fe.Field != "rate")) {
			t.Errorf("rate %v: %v, want ok=%v (a FieldError naming rate otherwise)", tc.rate, err, tc.ok)
		}
	}
}

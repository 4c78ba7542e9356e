// SPDX-License-Identifier: Apache-2.0

package api

import (
	"encoding"
	"encoding/json"
	"math"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/schema"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// openAPIDocument renders the routes table as an OpenAPI 3.0 document; the
// schemas come from the Go types by reflection, and request schemas carry
// the constraints of package schema, which decode enforces: what the
// document says about a request is what the server checks.
func openAPIDocument(rs []route, version string) ([]byte, error) {
	g := &schemaGen{defs: map[string]any{}}
	errRef := g.schema(reflect.TypeOf(apitypes.Error{}))
	paths := map[string]map[string]any{}
	pathParam := regexp.MustCompile(`\{(\w+)\}`)
	for _, rt := range rs {
		op := map[string]any{"operationId": rt.op, "summary": rt.summary}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(rt.path, -1) {
			p := map[string]any{"type": "string", "pattern": strategyNamePattern}
			desc := "a strategy name"
			if strings.Contains(rt.path, "/nodes/") {
				p["pattern"], desc = nodeNamePattern, "a node name"
			}
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "description": desc, "schema": p})
		}
		for _, q := range rt.query {
			sch := q.schema
			if sch == nil {
				sch = map[string]any{"type": "integer", "minimum": 0, "maximum": json.Number(strconv.FormatUint(math.MaxUint64, 10))}
			}
			params = append(params, map[string]any{"name": q.name, "in": "query", "description": q.desc, "schema": sch})
		}
		if params != nil {
			op["parameters"] = params
		}
		if rt.roles != nil {
			op["security"] = []any{map[string]any{"bearer": []string{}}}
			roles := make([]string, len(rt.roles))
			for i, r := range rt.roles {
				roles[i] = string(r)
			}
			op["x-roles"] = roles
			if rt.nodeScoped {
				op["x-agent-own-node-only"] = true
			}
		} else {
			op["security"] = []any{}
		}
		if rt.in != nil {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": g.input(reflect.TypeOf(rt.in), rt.inDef, rt.inRequire, rt.inOmit)}}}
		}
		status := rt.status
		if status == 0 {
			status = http.StatusOK
		}
		media := rt.contentOut
		if media == "" {
			media = "application/json"
		}
		var outSchema any = g.schema(reflect.TypeOf(rt.out))
		switch rt.contentOut {
		case "text/plain":
			outSchema = map[string]any{"type": "string"}
		case "text/event-stream":
			// Per event (OpenAPI 3.0 has no itemSchema): the SSE fields,
			// with the JSON of data described by contentSchema.
			outSchema = map[string]any{
				"type":     "object",
				"required": []string{"event", "id", "data"},
				"properties": map[string]any{
					"event": map[string]any{"type": "string", "enum": []string{"sync", "put", "delete"}, "description": "the data's type"},
					"id":    map[string]any{"type": "string", "pattern": "^[0-9]+$", "description": "the data's revision: resume after it with Last-Event-ID or ?revision="},
					"data": map[string]any{"type": "string", "contentMediaType": "application/json", "contentSchema": outSchema,
						"description": "a WatchEvent as JSON"},
				},
			}
		}
		resp := map[string]any{strconv.Itoa(status): map[string]any{
			"description": http.StatusText(status),
			"content":     map[string]any{media: map[string]any{"schema": outSchema}},
		}}
		if rt.method == "PUT" && rt.path == "/api/v1/strategies/{name}" {
			resp["201"] = map[string]any{"description": "Created", "content": map[string]any{media: map[string]any{"schema": outSchema}}}
		}
		resp["4XX"] = map[string]any{"description": "Error: {error, field, hint}", "content": map[string]any{"application/json": map[string]any{"schema": errRef}}}
		op["responses"] = resp
		if paths[rt.path] == nil {
			paths[rt.path] = map[string]any{}
		}
		paths[rt.path][strings.ToLower(rt.method)] = op
	}
	doc := map[string]any{
		"openapi": "3.0.3",
		"info": map[string]any{
			"title":   "swiftlane control plane",
			"version": version,
			"description": "Strategies, nodes and tokens of swiftlane's control plane. Request bodies are strict: unknown fields " +
				"(compared exactly), null where the schema does not allow it and trailing data are refused, and every constraint " +
				"below is checked. Errors are {error, field, hint}.",
		},
		"paths": paths,
		"components": map[string]any{
			"schemas":         g.defs,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer", "bearerFormat": "JWT (EdDSA)"}},
		},
	}
	return json.MarshalIndent(doc, "", "  ")
}

// Path parameter patterns: what the handlers accept (others get 400 or 404).
var (
	strategyNamePattern = "^" + strings.TrimSuffix(strings.TrimPrefix(strategy.NamePattern, "^("), ")?$") + "$"
	nodeNamePattern     = "^" + strings.TrimSuffix(strings.TrimPrefix(auth.NodePattern, "^("), ")?$") + "$"
)

type schemaGen struct {
	defs map[string]any
}

var (
	textMarshaler = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
	timeType      = reflect.TypeOf(time.Time{})
	classType     = reflect.TypeOf(strategy.Class(0))
)

func (g *schemaGen) schema(t reflect.Type) any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == classType:
		return map[string]any{"type": "string", "enum": []string{"critical", "high", "normal", "background"}}
	case t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler):
		return map[string]any{"type": "string"}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		if t.Elem().Kind() == reflect.Interface {
			return map[string]any{"type": "object"}
		}
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Struct:
		name := t.Name()
		ref := map[string]any{"$ref": "#/components/schemas/" + name}
		if _, done := g.defs[name]; done {
			return ref
		}
		g.defs[name] = nil // placeholder against recursion
		props := map[string]any{}
		var required []string
		g.fields(t, props, &required)
		def := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			def["required"] = required
		}
		g.defs[name] = def
		return ref
	}
	return map[string]any{}
}

// fields adds t's JSON fields, flattening embedded structs as encoding/json does.
func (g *schemaGen) fields(t reflect.Type, props map[string]any, required *[]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				g.fields(ft, props, required)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		ps := g.schema(f.Type)
		if schema.Nullable(f.Type, strings.Contains(opts, "omitempty")) {
			// Go writes a nil slice, map or pointer as null.
			if m, ok := ps.(map[string]any); ok {
				if _, isRef := m["$ref"]; isRef {
					ps = map[string]any{"allOf": []any{m}, "nullable": true}
				} else {
					m["nullable"] = true
				}
			}
		}
		props[name] = ps
		if !strings.Contains(opts, "omitempty") {
			*required = append(*required, name)
		}
	}
}

// input is the request schema of t: its fields with their rules (package
// schema), required as the rules say plus require, cross-field rules as
// allOf; null only where the server takes it; fields in omit left out. def
// names the component (default <Type>Input).
func (g *schemaGen) input(t reflect.Type, def string, require, omit []string) any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == timeType {
		return g.schema(t)
	}
	if def == "" {
		def = t.Name() + "Input"
	}
	ref := map[string]any{"$ref": "#/components/schemas/" + def}
	if _, done := g.defs[def]; done {
		return ref
	}
	g.defs[def] = nil // placeholder against recursion
	props := map[string]any{}
	var required []string
	for _, f := range schema.Fields(t) {
		if slices.Contains(omit, f.Name) {
			continue
		}
		r := f.Rule
		if slices.Contains(require, f.Name) {
			r.Required = true
			if r.MinLength == 0 && f.Type.Kind() == reflect.String {
				r.MinLength = 1
			}
		}
		if r.Required {
			required = append(required, f.Name)
		}
		props[f.Name] = g.inputField(f.Type, r, schema.Nullable(f.Type, f.OmitEmpty) && !r.Required)
	}
	d := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		d["required"] = required
	}
	if c, ok := reflect.Zero(t).Interface().(schema.Combined); ok {
		d["allOf"] = c.JSONAllOf()
	}
	g.defs[def] = d
	return ref
}

var (
	intBounds = map[reflect.Kind][2]string{
		reflect.Int:  {strconv.FormatInt(math.MinInt64, 10), strconv.FormatInt(math.MaxInt64, 10)},
		reflect.Int8: {"-128", "127"}, reflect.Int16: {"-32768", "32767"},
		reflect.Int32: {strconv.FormatInt(math.MinInt32, 10), strconv.FormatInt(math.MaxInt32, 10)},
		reflect.Int64: {strconv.FormatInt(math.MinInt64, 10), strconv.FormatInt(math.MaxInt64, 10)},
		reflect.Uint:  {"0", strconv.FormatUint(math.MaxUint64, 10)}, reflect.Uint8: {"0", "255"}, reflect.Uint16: {"0", "65535"},
		reflect.Uint32: {"0", strconv.FormatUint(math.MaxUint32, 10)}, reflect.Uint64: {"0", strconv.FormatUint(math.MaxUint64, 10)},
	}
)

// inputField is one request field's schema: its type (integers bounded by
// what their Go type holds: the decoder refuses the rest) and rule.
func (g *schemaGen) inputField(t reflect.Type, r schema.Rule, nullable bool) map[string]any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out map[string]any
	switch {
	case t == classType:
		out = map[string]any{"type": "string"}
	case t == timeType:
		out = map[string]any{"type": "string", "format": "date-time"}
	default:
		switch t.Kind() {
		case reflect.String:
			out = map[string]any{"type": "string"}
		case reflect.Bool:
			out = map[string]any{"type": "boolean"}
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			b := intBounds[t.Kind()]
			out = map[string]any{"type": "integer", "minimum": json.Number(b[0]), "maximum": json.Number(b[1])}
		case reflect.Float32, reflect.Float64:
			out = map[string]any{"type": "number"}
		case reflect.Slice, reflect.Array:
			var items map[string]any
			if r.Items != nil {
				items = g.inputField(t.Elem(), *r.Items, false)
			} else {
				items = g.inputField(t.Elem(), schema.Rule{}, false)
			}
			out = map[string]any{"type": "array", "items": items}
		case reflect.Map:
			var vals map[string]any
			if r.Items != nil {
				vals = g.inputField(t.Elem(), *r.Items, false)
			} else {
				vals = g.inputField(t.Elem(), schema.Rule{}, false)
			}
			out = map[string]any{"type": "object", "additionalProperties": vals}
		case reflect.Struct:
			ref := g.input(t, "", nil, nil)
			if !nullable && r.Doc == "" {
				return ref.(map[string]any)
			}
			out = map[string]any{"allOf": []any{ref}}
		default:
			out = map[string]any{}
		}
	}
	if r.MinLength > 0 {
		out["minLength"] = r.MinLength
	}
	if r.MaxLength > 0 {
		out["maxLength"] = r.MaxLength
	}
	if r.Pattern != "" {
		out["pattern"] = r.Pattern
	}
	if len(r.Enum) > 0 {
		out["enum"] = r.Enum
	}
	if r.Min != nil {
		out["minimum"] = *r.Min
	}
	if r.Max != nil {
		out["maximum"] = *r.Max
	}
	if r.Exclude != nil {
		out["not"] = map[string]any{"minimum": r.Exclude[0], "maximum": r.Exclude[1]}
	}
	if r.MinItems > 0 {
		out["minItems"] = r.MinItems
	}
	if r.MaxItems > 0 {
		out["maxItems"] = r.MaxItems
	}
	if r.NoEmptyKey {
		out["not"] = map[string]any{"required": []string{""}}
	}
	if r.Format != "" {
		out["format"] = r.Format
	}
	if r.Doc != "" {
		out["description"] = r.Doc
	}
	if nullable {
		out["nullable"] = true
	}
	return out
}

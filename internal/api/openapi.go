// SPDX-License-Identifier: Apache-2.0

package api

import (
	"encoding"
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

// openAPIDocument renders the routes table as an OpenAPI 3.0 document; the
// schemas come from the Go types by reflection.
func openAPIDocument(rs []route, version string) ([]byte, error) {
	g := &schemaGen{defs: map[string]any{}}
	errRef := g.schema(reflect.TypeOf(Error{}))
	paths := map[string]map[string]any{}
	pathParam := regexp.MustCompile(`\{(\w+)\}`)
	for _, rt := range rs {
		op := map[string]any{"operationId": rt.op, "summary": rt.summary}
		var params []any
		for _, m := range pathParam.FindAllStringSubmatch(rt.path, -1) {
			params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
		}
		for _, q := range rt.query {
			params = append(params, map[string]any{"name": q.name, "in": "query", "description": q.desc, "schema": map[string]any{"type": "integer", "minimum": 0}})
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
				"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(rt.in))}}}
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
		if rt.contentOut == "text/plain" {
			outSchema = map[string]any{"type": "string"}
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
			"title":       "swiftlane control plane",
			"version":     version,
			"description": "Strategies, nodes and tokens of swiftlane's control plane. Bodies are strict: unknown fields are refused. Errors are {error, field, hint}.",
		},
		"paths": paths,
		"components": map[string]any{
			"schemas":         g.defs,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer", "bearerFormat": "JWT (EdDSA)"}},
		},
	}
	return json.MarshalIndent(doc, "", "  ")
}

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
		props[name] = g.schema(f.Type)
		if !strings.Contains(opts, "omitempty") {
			*required = append(*required, name)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package api

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

type openAPIDoc struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]map[string]any `json:"schemas"`
	} `json:"components"`
}

// TestOpenAPIMatchesServer checks both directions: every documented
// operation is served, every served route is documented, and what GET
// endpoints return has exactly the documented fields.
func TestOpenAPIMatchesServer(t *testing.T) { eachStore(t, testOpenAPIMatchesServer) }

func testOpenAPIMatchesServer(t *testing.T, bk backend) {
	ts := startServer(t, t.TempDir(), serverOpt{backend: bk})
	admin := ts.token(auth.Admin, "")
	ag := ts.client(ts.token(auth.Agent, "n1"))
	if _, err := ag.RegisterNode(bg(), "n1", apitypes.Registration{Mode: "observe", HeartbeatSeconds: 5, Labels: map[string]string{"a": "b"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ag.Heartbeat(bg(), "n1", apitypes.Heartbeat{Counters: &apitypes.Counters{Enqueued: map[string]uint64{"high": 1},
		RunqueueWait: map[string]apitypes.WaitHistogram{"high": {Count: 1, Buckets: []uint64{1}}}},
		Workloads: []apitypes.Workload{{PID: 1, Strategy: "s1", Class: "high", Cmdline: "x"}}}); err != nil {
		t.Fatal(err)
	}
	s := critical("s1", "x")
	s.Namespaces, s.NodeSelector, s.ExecutionTime, s.PID = []string{"ns"}, map[string]string{"a": "b"}, 60000, 1
	s.Selectors = []strategy.Selector{{Key: "app", Value: "x"}} // namespaces scope pod selectors
	if _, err := ts.client(admin).CreateStrategy(bg(), s); err != nil {
		t.Fatal(err)
	}
	code, body := ts.raw("GET", "/openapi.json", "", "")
	var doc openAPIDoc
	if code != 200 || json.Unmarshal(body, &doc) != nil {
		t.Fatalf("openapi.json: %d", code)
	}
	var documented, served []string
	for p, ops := range doc.Paths {
		for m := range ops {
			documented = append(documented, strings.ToUpper(m)+" "+p)
		}
	}
	for _, rt := range routes() {
		served = append(served, rt.method+" "+rt.path)
	}
	sort.Strings(documented)
	sort.Strings(served)
	if fmt.Sprint(documented) != fmt.Sprint(served) {
		t.Fatalf("documented %v\nserved %v", documented, served)
	}
	for _, op := range documented {
		method, path, _ := strings.Cut(op, " ")
		path = strings.ReplaceAll(path, "{name}", map[bool]string{true: "n1", false: "s1"}[strings.Contains(path, "/nodes/")])
		code, body := ts.raw(method, path, admin, "{}")
		if code == 404 && strings.Contains(string(body), "no endpoint") || code == 405 {
			t.Errorf("%s is documented but not served: %d %s", op, code, body)
		}
		if method != "GET" || code != 200 || strings.HasSuffix(path, "/metrics") && !strings.HasPrefix(path, "/api") || strings.Contains(path, "watch") || path == "/openapi.json" {
			continue
		}
		var resp struct {
			Responses map[string]struct {
				Content map[string]struct {
					Schema map[string]any `json:"schema"`
				} `json:"content"`
			} `json:"responses"`
		}
		_ = json.Unmarshal(doc.Paths[strings.TrimPrefix(op, "GET ")]["get"], &resp)
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if err := conforms(doc, resp.Responses["200"].Content["application/json"].Schema, v, ""); err != nil {
			t.Errorf("%s: response does not match the document: %v\n%s", op, err, body)
		}
	}
}

// conforms checks v against a (generated, so simple) schema: types, no
// undocumented properties, required properties present.
func conforms(doc openAPIDoc, sch map[string]any, v any, at string) error {
	if ref, ok := sch["$ref"].(string); ok {
		return conforms(doc, doc.Components.Schemas[strings.TrimPrefix(ref, "#/components/schemas/")], v, at)
	}
	switch sch["type"] {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want object, got %T", at, v)
		}
		props, _ := sch["properties"].(map[string]any)
		extra, _ := sch["additionalProperties"].(map[string]any)
		for k, val := range obj {
			ps, ok := props[k].(map[string]any)
			if !ok {
				ps = extra
			}
			if ps == nil {
				if props == nil && sch["additionalProperties"] == nil {
					continue // free-form object
				}
				return fmt.Errorf("%s.%s: not in the document", at, k)
			}
			if err := conforms(doc, ps, val, at+"."+k); err != nil {
				return err
			}
		}
		req, _ := sch["required"].([]any)
		for _, r := range req {
			if _, ok := obj[r.(string)]; !ok {
				return fmt.Errorf("%s.%s: required but missing", at, r)
			}
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want array, got %T", at, v)
		}
		for i, x := range arr {
			if err := conforms(doc, sch["items"].(map[string]any), x, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: want string, got %T", at, v)
		}
	case "integer", "number":
		if _, ok := v.(float64); !ok {
			return fmt.Errorf("%s: want number, got %T", at, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: want boolean, got %T", at, v)
		}
	}
	return nil
}

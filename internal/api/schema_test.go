// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/auth"
)

// validBodies is one accepted body per route that takes one.
var validBodies = map[string]string{
	"POST /api/v1/auth/token":             `{"username":"admin","password":"x"}`,
	"POST /api/v1/tokens":                 `{"role":"viewer"}`,
	"POST /api/v1/tokens/renew":           `{"ttl_seconds":600}`,
	"POST /api/v1/tokens/revoke":          `{"id":"abc"}`,
	"POST /api/v1/strategies":             `{"name":"a","class":"high","command_regex":"x"}`,
	"PUT /api/v1/strategies/{name}":       `{"class":"high","command_regex":"x"}`,
	"PUT /api/v1/nodes/{name}":            `{"mode":"observe","heartbeat_seconds":5}`,
	"POST /api/v1/nodes/{name}/heartbeat": `{"workloads":[]}`,
	"POST /api/v1/scheduling/strategies":  `{"strategies":[]}`,
	"POST /api/v1/metrics":                `{"nr_queued":3}`,
}

// TestEveryEndpointRefusesUnknownFields: every route with a body refuses a
// field it does not have (compared exactly, so a differently cased known
// name too), a null body, and null for a field that is not nullable; the
// store is unchanged.
func TestEveryEndpointRefusesUnknownFields(t *testing.T) {
	ts := startServer(t, t.TempDir(), serverOpt{})
	admin := ts.token(auth.Admin, "")
	if _, err := ts.client(admin).RegisterNode(bg(), "n1", apitypes.Registration{Mode: "observe", HeartbeatSeconds: 5}); err != nil {
		t.Fatal(err)
	}
	before, _ := ts.client(admin).ListStrategies(bg())
	for _, rt := range routes() {
		if rt.in == nil {
			continue
		}
		key := rt.method + " " + rt.path
		valid, ok := validBodies[key]
		if !ok {
			t.Errorf("%s: no valid body in the test table", key)
			continue
		}
		path := strings.ReplaceAll(rt.path, "{name}", map[bool]string{true: "n1", false: "s1"}[strings.Contains(rt.path, "/nodes/")])
		first := strings.SplitN(valid, `"`, 3)[1]
		var m map[string]any
		_ = json.Unmarshal([]byte(valid), &m)
		m[first] = nil
		withNull, _ := json.Marshal(m)
		cases := []struct{ body, field string }{
			{strings.Replace(valid, "{", `{"zz_unknown":1,`, 1), "zz_unknown"},
			{strings.Replace(valid, `"`+first+`"`, `"`+strings.ToUpper(first)+`"`, 1), strings.ToUpper(first)},
			{`null`, ""},
		}
		if first != "workloads" { // a nil slice the agent itself sends as null
			cases = append(cases, struct{ body, field string }{string(withNull), first})
		}
		for _, tc := range cases {
			code, body := ts.raw(rt.method, path, admin, tc.body)
			var e apitypes.Error
			if code != 400 || json.Unmarshal(body, &e) != nil || e.Field != tc.field || e.Hint == "" {
				t.Errorf("%s %s: %d %s, want 400 naming %q", key, tc.body, code, body, tc.field)
			}
		}
	}
	if after, _ := ts.client(admin).ListStrategies(bg()); after.Revision != before.Revision {
		t.Errorf("refused bodies changed the store")
	}
}

// TestOpenAPIStatesWhatDecodeChecks: the constraints schemathesis found
// missing from the document are in it, and the server refuses what they
// exclude with a 400 naming the field (both come from package schema).
func TestOpenAPIStatesWhatDecodeChecks(t *testing.T) {
	ts := startServer(t, t.TempDir(), serverOpt{})
	admin := ts.token(auth.Admin, "")
	_, body := ts.raw("GET", "/openapi.json", "", "")
	var doc struct {
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	prop := func(def, field, kw string) any {
		props, _ := doc.Components.Schemas[def]["properties"].(map[string]any)
		p, _ := props[field].(map[string]any)
		return p[kw]
	}
	required := func(def string) string {
		b, _ := json.Marshal(doc.Components.Schemas[def]["required"])
		return string(b)
	}
	for _, tc := range []struct {
		def, field, kw string
		want           any
		method         string
		path, body     string
	}{
		{"TokenRequestInput", "role", "enum", []any{"admin", "viewer", "agent"}, "POST", "/api/v1/tokens", `{"role":""}`},
		{"SelectorInput", "key", "minLength", 1.0, "POST", "/api/v1/strategies", `{"name":"a","class":"high","selectors":[{"key":"","value":"x"}]}`},
		{"StrategyCreateInput", "name", "minLength", 1.0, "POST", "/api/v1/strategies", `{"name":"","class":"high","command_regex":"x"}`},
		{"RegistrationInput", "mode", "enum", []any{"schedule", "observe"}, "PUT", "/api/v1/nodes/n1", `{"mode":"","heartbeat_seconds":5}`},
		{"RegistrationInput", "heartbeat_seconds", "minimum", 1.0, "PUT", "/api/v1/nodes/n1", `{"mode":"observe","heartbeat_seconds":0}`},
		{"WaitHistogramInput", "buckets", "maxItems", 64.0, "", "", ""},
		{"StrategyCreateInput", "cgroup_path", "pattern", `^(/|(/[^/.][^/]*)+)?$`, "POST", "/api/v1/strategies", `{"name":"a","class":"high","cgroup_path":"/a/../b"}`},
		{"StrategyCreateInput", "execution_time", "not", map[string]any{"minimum": 1.0, "maximum": 49999.0}, "POST", "/api/v1/strategies", `{"name":"a","class":"high","command_regex":"x","execution_time":49999}`},
		{"Gen1StrategyInput", "execution_time", "minimum", 0.0, "", "", ""},
		{"LoginRequestInput", "ttl_seconds", "maximum", float64(auth.MaxTTL / time.Second), "POST", "/api/v1/auth/token", `{"username":"admin","password":"x","ttl_seconds":9223372036854}`},
	} {
		got, _ := json.Marshal(prop(tc.def, tc.field, tc.kw))
		want, _ := json.Marshal(tc.want)
		if string(got) != string(want) {
			t.Errorf("%s.%s %s = %s, want %s", tc.def, tc.field, tc.kw, got, want)
		}
		if tc.method == "" {
			continue
		}
		code, body := ts.raw(tc.method, tc.path, admin, tc.body)
		var e apitypes.Error
		if code != 400 || json.Unmarshal(body, &e) != nil || !strings.HasSuffix(e.Field, tc.field) {
			t.Errorf("%s %s %s: %d %s, want 400 naming %s", tc.method, tc.path, tc.body, code, body, tc.field)
		}
	}
	if r := required("StrategyCreateInput"); !strings.Contains(r, `"name"`) {
		t.Errorf("StrategyCreateInput required %s lacks name", r)
	}
	if r := required("StrategyPutInput"); strings.Contains(r, `"name"`) {
		t.Errorf("StrategyPutInput required %s has name (it is the URL's)", r)
	}
	if doc.Components.Schemas["StrategyCreateInput"]["additionalProperties"] != false {
		t.Error("request schemas must refuse unknown fields")
	}
}

// TestWatchEventsMatchTheDocument reads real SSE events and checks them
// against the documented per-event schema: event, id and data, whose JSON
// is a WatchEvent with the event's type and revision.
func TestWatchEventsMatchTheDocument(t *testing.T) {
	ts := startServer(t, t.TempDir(), serverOpt{})
	admin := ts.token(auth.Admin, "")
	_, body := ts.raw("GET", "/openapi.json", "", "")
	var full map[string]any
	var doc openAPIDoc
	if json.Unmarshal(body, &full) != nil || json.Unmarshal(body, &doc) != nil {
		t.Fatal("openapi.json")
	}
	op := full["paths"].(map[string]any)["/api/v1/watch/strategies"].(map[string]any)["get"].(map[string]any)
	evSchema := op["responses"].(map[string]any)["200"].(map[string]any)["content"].(map[string]any)["text/event-stream"].(map[string]any)["schema"].(map[string]any)
	props := evSchema["properties"].(map[string]any)
	dataSchema := props["data"].(map[string]any)["contentSchema"].(map[string]any)
	events := props["event"].(map[string]any)["enum"].([]any)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.url+"/api/v1/watch/strategies", nil)
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := ts.client(admin).CreateStrategy(bg(), critical("s1", "x")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	for n := 0; n < 2; { // the sync event, then the put
		ev := map[string]string{}
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			line = strings.TrimRight(line, "\n")
			if line == "" {
				break
			}
			if strings.HasPrefix(line, ":") {
				continue
			}
			k, v, _ := strings.Cut(line, ": ")
			ev[k] = v
		}
		if len(ev) == 0 {
			continue
		}
		n++
		for _, k := range evSchema["required"].([]any) {
			if _, ok := ev[k.(string)]; !ok {
				t.Fatalf("event %v lacks %s", ev, k)
			}
		}
		known := false
		for _, e := range events {
			known = known || e == ev["event"]
		}
		var data any
		if !known || json.Unmarshal([]byte(ev["data"]), &data) != nil {
			t.Fatalf("event %v: unknown type or data not JSON", ev)
		}
		if err := conforms(doc, dataSchema, data, "data"); err != nil {
			t.Fatalf("event %v: %v", ev, err)
		}
		if d := data.(map[string]any); d["type"] != ev["event"] || json.Number(ev["id"]).String() != strings.TrimSuffix(strings.TrimSuffix(jsonNum(d["revision"]), ".0"), "") {
			t.Fatalf("event %v: data type/revision differ from the SSE fields", ev)
		}
	}
}

func jsonNum(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

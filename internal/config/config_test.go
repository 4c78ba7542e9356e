// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

func TestDefaultsWithoutFile(t *testing.T) {
	cfg, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Scheduler.SliceNsDefault != 2_000_000 || cfg.Scheduler.SliceNsMin != 500_000 || cfg.API.Interval != 5 ||
		cfg.Scheduler.Mode != ModeKernel || cfg.Scheduler.Policy != "" {
		t.Fatalf("unexpected defaults: %+v", cfg)
	}
}

// TestDefaultAPIURLIsTheServersDefault: a config file that sets no api.url
// sends the agent where `swiftlane api` serves by default, with the scheme
// it serves (it used to say http://127.0.0.1:8080, where nothing listens).
func TestDefaultAPIURLIsTheServersDefault(t *testing.T) {
	cfg, err := Parse([]byte("api:\n  interval: 7\n"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.API.URL)
	if err != nil {
		t.Fatal(err)
	}
	srv := DefaultAPIServer()
	scheme := "https"
	if srv.TLS.InsecureHTTP {
		scheme = "http"
	}
	if u.Scheme != scheme || u.Host != srv.Listen || (u.Path != "" && u.Path != "/") {
		t.Fatalf("api.url defaults to %s; the API server serves %s://%s", cfg.API.URL, scheme, srv.Listen)
	}
}

func TestReferenceKeysAndStrategies(t *testing.T) {
	cfg, err := Parse([]byte(`
scheduler:
  slice_ns_default: 20000000
  slice_ns_min: 1000000
api:
  enabled: true
  url: http://127.0.0.1:8080
  interval: 5
debug: true
early_processing: true
builtin_idle: true
queued_wakeup: true
strategies:
  - name: gnb
    class: critical
    command_regex: "nr-gnb|nr-ue|ping"
    execution_time: 20000000
  - priority: true
    pid: 42
`))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Debug || !cfg.EarlyProcessing || !cfg.BuiltinIdle || !cfg.QueuedWakeup || cfg.API.Enabled == nil || !*cfg.API.Enabled {
		t.Fatalf("booleans not read: %+v", cfg)
	}
	if cfg.API.URL != "http://127.0.0.1:8080" {
		t.Fatalf("api.url = %q, want the reference's value as written", cfg.API.URL)
	}
	if got := cfg.Strategies[0].EffectiveClass(); got != strategy.Critical {
		t.Fatalf("class = %v", got)
	}
	if got := cfg.Strategies[1].EffectiveClass(); got != strategy.Critical {
		t.Fatalf("priority: true must mean critical, got %v", got)
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	cases := []struct{ yaml, key, hint string }{
		{"scheduler:\n  slice_ns_defalt: 5\n", "scheduler.slice_ns_defalt", "known keys here"},
		{"bogus: 1\n", "bogus", "unknown key"},
		{"scheduler:\n  slice_ns_min: abc\n", "scheduler.slice_ns_min", "not a valid"},
		{"scheduler:\n  slice_ns_default: 10\n", "scheduler.slice_ns_default", "out of range"},
		{"scheduler:\n  slice_ns_min: 3000000\n", "scheduler.slice_ns_min", "up to scheduler.slice_ns_default"},
		{"scheduler:\n  mode: hybrid\n", "scheduler.mode", "use kernel (the policy runs in BPF) or userspace"},
		{"api:\n  url: ftp://x\n", "api.url", "http(s)"},
		{"api:\n  interval: 0\n", "api.interval", "1..3600"},
		{"strategies:\n  - class: critical\n", "strategies[0].command_regex", "at least one matcher"},
		{"strategies:\n  - class: urgent\n    pid: 1\n", "strategies[0].class", "critical, high"},
		{"strategies:\n  - class: high\n    command_regex: '('\n", "strategies[0].command_regex", "RE2"},
		{"strategies:\n  - class: high\n    pid: 1\n    execution_time: 10\n", "strategies[0].execution_time", "out of range"},
		{"strategies:\n  - class: high\n    pid: 1\n    colour: red\n", "strategies[0].colour", "unknown key"},
		{"strategies:\n  - {name: a, class: high, pid: 1}\n  - {name: a, class: high, pid: 2}\n", "strategies[1].name", "unique"},
		{"strategies:\n  - {class: high, cgroup_path: relative/x}\n", "strategies[0].cgroup_path", "absolute"},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.yaml))
		if err == nil {
			t.Errorf("%q: accepted, want error on %s", c.yaml, c.key)
			continue
		}
		var fe *strategy.FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%q: error %v is not a FieldError", c.yaml, err)
			continue
		}
		if fe.Field != c.key || !strings.Contains(err.Error(), c.hint) {
			t.Errorf("%q: got %q (key %s), want key %s and hint %q", c.yaml, err, fe.Field, c.key, c.hint)
		}
	}
}

// The user-space mode is chosen in the file too (the agent has no --mode).
func TestSchedulerModeKeys(t *testing.T) {
	cfg, err := Parse([]byte("scheduler:\n  mode: userspace\n  policy: fifo\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Scheduler.Mode != ModeUserspace || cfg.Scheduler.Policy != "fifo" || cfg.Scheduler.SliceNsDefault != 2_000_000 {
		t.Fatalf("scheduler: %+v", cfg.Scheduler)
	}
}

// api.enabled must agree with the command that reads the file: a file
// that says otherwise is refused with the key, its line and the fix, not
// ignored. Left out, it is never an error.
func TestAPIEnabledAgreesWithTheCommand(t *testing.T) {
	for _, tc := range []struct {
		enabled string // "": the key left out
		cmd     Command
		want    string // "": accepted
	}{
		{"", Run, ""}, {"", Agent, ""}, {"", KubeAgent, ""},
		{"true", Agent, ""}, {"false", Run, ""}, {"false", KubeAgent, ""},
		{"true", Run, "api.enabled (line 3): true, but swiftlane run never connects to a control plane: run `swiftlane agent --config FILE`"},
		{"false", Agent, "api.enabled (line 3): false, but swiftlane agent always connects to api.url for its strategies: run `swiftlane run --config FILE`"},
		{"true", KubeAgent, "api.enabled (line 3): true, but swiftlane agent --source kubernetes takes strategies from SchedulingStrategy objects"},
	} {
		file := "debug: false\napi:\n  interval: 5\n"
		if tc.enabled != "" {
			file = "debug: false\napi:\n  enabled: " + tc.enabled + "\n  interval: 5\n"
		}
		cfg, err := Parse([]byte(file))
		if err != nil {
			t.Fatal(err)
		}
		err = cfg.CheckAPIEnabled(tc.cmd)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("enabled %q, command %d: %v", tc.enabled, tc.cmd, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("enabled %q, command %d: got %v, want %q", tc.enabled, tc.cmd, err, tc.want)
		}
	}
}

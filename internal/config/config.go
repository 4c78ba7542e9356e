// SPDX-License-Identifier: Apache-2.0

// Package config is swiftlane's one configuration type: its defaults, its
// validation and the YAML file format. Every entry point loads it here.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

// Config is the whole file. Field docs are the reference in README.md.
type Config struct {
	Scheduler Scheduler `yaml:"scheduler"`
	API       API       `yaml:"api"`
	// Debug turns on verbose logging of strategy matches and events.
	Debug bool `yaml:"debug"`
	// EarlyProcessing lets per-CPU kthreads (ksoftirqd, per-CPU workers)
	// preempt the running task instead of waiting for its slice to end.
	EarlyProcessing bool `yaml:"early_processing"`
	// BuiltinIdle places wakeups with the kernel's idle-CPU selection instead
	// of swiftlane's own (previous CPU → idle core → cache sibling → any).
	BuiltinIdle bool `yaml:"builtin_idle"`
	// QueuedWakeup lets the kernel hand a wakeup to the wakee's CPU, which
	// queues it itself (SCX_OPS_ALLOW_QUEUED_WAKEUP, Linux 6.15 on; ignored
	// before), instead of the waker queueing it and kicking that CPU.
	QueuedWakeup bool `yaml:"queued_wakeup"`
	// Strategies give matched processes a class and optionally a slice.
	Strategies []strategy.Strategy `yaml:"strategies"`
	// Automatic prioritises the processes found carrying GTP-U traffic.
	Automatic Automatic `yaml:"automatic"`
}

// Automatic configures the GTP-U tracer and operator (docs/gtp.md).
type Automatic struct {
	Enabled bool `yaml:"enabled"`
	// Functions are the kernel functions traced; empty: the gtp and gtp5g
	// defaults (internal/trace.DefaultFunctions).
	Functions []string `yaml:"functions"`
	// Class given to a process that carries GTP-U traffic.
	Class strategy.Class `yaml:"class"`
	// SliceNs is its slice (ns); 0 keeps the scheduler's.
	SliceNs uint64 `yaml:"slice_ns"`
	// IdleTimeoutMs: a process that carried no GTP-U packet for this long
	// loses its entry.
	IdleTimeoutMs int `yaml:"idle_timeout_ms"`
	// Companions are RE2 command regexes (e.g. the UE simulator, ping) given
	// the same class while any process carries GTP-U traffic.
	Companions []string `yaml:"companions"`
	// TUNDevices are shell patterns of TUN device names whose readers and
	// writers are carriers too (a UE simulator's tunnel, uesimtun0); the tun
	// driver is traced only when this is not empty.
	TUNDevices []string `yaml:"tun_devices"`
}

// DefaultTUNDevices matches the tunnels UERANSIM's nr-ue creates.
var DefaultTUNDevices = []string{"uesimtun*"}

// Scheduler holds the scheduler's tunables and where its policy runs.
type Scheduler struct {
	// Mode is where the scheduling policy runs: ModeKernel (in BPF) or
	// ModeUserspace (a Go loop in swiftlane's process, docs/userspace.md).
	Mode string `yaml:"mode"`
	// Policy is user-space mode's built-in policy (usersched.PolicyNames;
	// empty: vruntime). The node runtime checks it against the mode in use,
	// which `swiftlane run --mode` may override.
	Policy string `yaml:"policy"`
	// SliceNsDefault is the slice a task gets when few tasks wait (ns).
	SliceNsDefault uint64 `yaml:"slice_ns_default"`
	// SliceNsMin is the smallest slice, reached when many tasks wait (ns).
	SliceNsMin uint64 `yaml:"slice_ns_min"`
}

// API is the control-plane connection (used by the node agent).
type API struct {
	// Enabled is the generation-1 switch. The command decides whether a
	// node connects (swiftlane agent does, run does not), so the key only
	// has to agree with it: CheckAPIEnabled refuses a file that says
	// otherwise instead of ignoring it. nil: not in the file.
	Enabled *bool  `yaml:"enabled"`
	URL     string `yaml:"url"`
	// Interval is the heartbeat period in seconds.
	Interval int `yaml:"interval"`
	// enabledLine is api.enabled's line in the file (0: not from a file).
	enabledLine int
}

// Node commands, which api.enabled must agree with.
type Command int

const (
	Run       Command = iota // swiftlane run: no control plane
	Agent                    // swiftlane agent --source api: connects to api.url
	KubeAgent                // swiftlane agent --source kubernetes: Kubernetes objects, not api.url
)

// CheckAPIEnabled refuses an api.enabled that contradicts what cmd does,
// naming the key, its line and the fix. Reference files (api.enabled: true)
// load unchanged in swiftlane agent.
func (c *Config) CheckAPIEnabled(cmd Command) error {
	if c.API.Enabled == nil {
		return nil
	}
	on := *c.API.Enabled
	var msg string
	switch {
	case cmd == Run && on:
		msg = "true, but swiftlane run never connects to a control plane: run `swiftlane agent --config FILE` to take strategies from api.url, " +
			"or delete api.enabled to schedule with this file's strategies"
	case cmd == Agent && !on:
		msg = "false, but swiftlane agent always connects to api.url for its strategies: run `swiftlane run --config FILE` to schedule without a control plane, " +
			"or delete api.enabled"
	case cmd == KubeAgent && on:
		msg = "true, but swiftlane agent --source kubernetes takes strategies from SchedulingStrategy objects and never connects to api.url: " +
			"delete api.enabled, or use --source api"
	default:
		return nil
	}
	return &strategy.FieldError{Field: "api.enabled", Line: c.API.enabledLine, Msg: msg}
}

// Scheduler modes (scheduler.mode).
const (
	ModeKernel    = "kernel"
	ModeUserspace = "userspace"
)

// DefaultAPIURL is api.url's default: the API server's default address
// and scheme. (The reference's http://127.0.0.1:8080 is still accepted
// when written, but our server serves HTTPS on DefaultListen.)
const DefaultAPIURL = "https://" + DefaultListen

// Default returns the configuration used when no file is given.
func Default() Config {
	return Config{
		Scheduler: Scheduler{Mode: ModeKernel, SliceNsDefault: 2_000_000, SliceNsMin: 500_000},
		API:       API{URL: DefaultAPIURL, Interval: 5},
		Automatic: Automatic{Class: strategy.Critical, IdleTimeoutMs: 5000, TUNDevices: slices.Clone(DefaultTUNDevices)},
	}
}

// Load reads and validates a config file. Keys missing from the file keep
// their defaults.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes YAML over the defaults, rejecting unknown keys by name, and
// validates the result.
func Parse(data []byte) (Config, error) {
	cfg := Default()
	if err := decodeFile(data, &cfg, cfg.Validate); err != nil {
		return Config{}, err
	}
	if cfg.API.Enabled != nil {
		var root yaml.Node
		if yaml.Unmarshal(data, &root) == nil && len(root.Content) > 0 {
			cfg.API.enabledLine = keyLine(root.Content[0], "api.enabled")
		}
	}
	return cfg, nil
}

// Validate checks values; the error names the first bad key.
func (c *Config) Validate() error {
	s := c.Scheduler
	if s.SliceNsDefault < strategy.MinSliceNs || s.SliceNsDefault > strategy.MaxSliceNs {
		return &strategy.FieldError{Field: "scheduler.slice_ns_default", Msg: fmt.Sprintf("%d is out of range: use %d..%d ns (e.g. 2000000 for 2 ms)", s.SliceNsDefault, strategy.MinSliceNs, strategy.MaxSliceNs)}
	}
	if s.SliceNsMin < strategy.MinSliceNs || s.SliceNsMin > s.SliceNsDefault {
		return &strategy.FieldError{Field: "scheduler.slice_ns_min", Msg: fmt.Sprintf("%d is out of range: use %d ns up to scheduler.slice_ns_default (%d)", s.SliceNsMin, strategy.MinSliceNs, s.SliceNsDefault)}
	}
	if s.Mode != ModeKernel && s.Mode != ModeUserspace {
		return &strategy.FieldError{Field: "scheduler.mode", Msg: fmt.Sprintf("%q is not a mode: use %s (the policy runs in BPF) or %s (in swiftlane's process)", s.Mode, ModeKernel, ModeUserspace)}
	}
	if c.API.Interval < 1 || c.API.Interval > 3600 {
		return &strategy.FieldError{Field: "api.interval", Msg: fmt.Sprintf("%d is out of range: use 1..3600 seconds", c.API.Interval)}
	}
	if c.API.URL != "" {
		u, err := url.Parse(c.API.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return &strategy.FieldError{Field: "api.url", Msg: fmt.Sprintf("%q is not an http(s) URL: use e.g. https://127.0.0.1:8443", c.API.URL)}
		}
	}
	if err := c.Automatic.validate(); err != nil {
		return err
	}
	names := map[string]int{}
	for i := range c.Strategies {
		st := &c.Strategies[i]
		key := fmt.Sprintf("strategies[%d]", i)
		if err := st.Validate(); err != nil {
			var fe *strategy.FieldError
			if errors.As(err, &fe) {
				return &strategy.FieldError{Field: key + "." + fe.Field, Msg: fe.Msg}
			}
			return &strategy.FieldError{Field: key, Msg: err.Error()}
		}
		if st.Name != "" {
			if j, dup := names[st.Name]; dup {
				return &strategy.FieldError{Field: key + ".name", Msg: fmt.Sprintf("%q is already used by strategies[%d]: names must be unique", st.Name, j)}
			}
			names[st.Name] = i
		}
	}
	return nil
}

func (a *Automatic) validate() error {
	if a.Class > strategy.Background {
		return &strategy.FieldError{Field: "automatic.class", Msg: fmt.Sprintf("%s is not a class: use critical, high, normal or background", a.Class)}
	}
	if a.SliceNs != 0 && (a.SliceNs < strategy.MinSliceNs || a.SliceNs > strategy.MaxSliceNs) {
		return &strategy.FieldError{Field: "automatic.slice_ns", Msg: fmt.Sprintf("%d is out of range: use %d..%d ns, or 0 for the scheduler's slice", a.SliceNs, strategy.MinSliceNs, strategy.MaxSliceNs)}
	}
	if a.IdleTimeoutMs < 100 || a.IdleTimeoutMs > 3_600_000 {
		return &strategy.FieldError{Field: "automatic.idle_timeout_ms", Msg: fmt.Sprintf("%d is out of range: use 100..3600000 ms (e.g. 5000)", a.IdleTimeoutMs)}
	}
	for i, fn := range a.Functions {
		if !funcNameRE.MatchString(fn) {
			return &strategy.FieldError{Field: fmt.Sprintf("automatic.functions[%d]", i), Msg: fmt.Sprintf("%q is not a kernel function name: use e.g. gtp_encap_recv", fn)}
		}
	}
	for i, re := range a.Companions {
		if _, err := regexp.Compile(re); err != nil {
			return &strategy.FieldError{Field: fmt.Sprintf("automatic.companions[%d]", i), Msg: fmt.Sprintf("invalid RE2 regular expression: %v", err)}
		}
	}
	for i, p := range a.TUNDevices {
		if _, err := path.Match(p, ""); err != nil || p == "" || len(p) > 64 {
			return &strategy.FieldError{Field: fmt.Sprintf("automatic.tun_devices[%d]", i), Msg: fmt.Sprintf("%q is not a device name pattern: use a shell pattern such as uesimtun* ([] traces no TUN device)", p)}
		}
	}
	return nil
}

var funcNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// checkKeys walks a mapping node against a struct type and reports the first
// key the struct does not have, with its full dotted path.
func checkKeys(n *yaml.Node, t reflect.Type, prefix string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		for i, item := range n.Content {
			if err := checkKeys(item, t.Elem(), fmt.Sprintf("%s[%d]", prefix, i)); err != nil {
				return err
			}
		}
		return nil
	case n.Kind == yaml.ScalarNode:
		// Decode the lone value now so a bad one is reported with its key.
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			msg := err.Error()
			var te *yaml.TypeError
			if errors.As(err, &te) && len(te.Errors) > 0 {
				msg = fmt.Sprintf("%q is not a valid %s", n.Value, t.Kind())
			}
			return &strategy.FieldError{Field: prefix, Line: n.Line, Msg: msg}
		}
		return nil
	case n.Kind != yaml.MappingNode || t.Kind() != reflect.Struct:
		return nil
	}
	fields := map[string]reflect.Type{}
	var known []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if name == "" || name == "-" {
			continue
		}
		fields[name] = f.Type
		known = append(known, name)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		path := k.Value
		if prefix != "" {
			path = prefix + "." + k.Value
		}
		ft, ok := fields[k.Value]
		if !ok {
			return &strategy.FieldError{Field: path, Line: k.Line, Msg: fmt.Sprintf("unknown key; known keys here: %s", strings.Join(known, ", "))}
		}
		if err := checkKeys(n.Content[i+1], ft, path); err != nil {
			return err
		}
	}
	return nil
}

// friendlyDecodeError turns yaml.v3 type errors into one line per problem.
func friendlyDecodeError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return fmt.Errorf("bad value: %s", strings.Join(te.Errors, "; "))
	}
	return err
}

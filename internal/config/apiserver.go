// SPDX-License-Identifier: Apache-2.0

package config

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// APIServer is the file of `swiftlane api --config`. Every key is
// optional; flags given on the command line override the file.
type APIServer struct {
	// Listen is the address to serve on.
	Listen string `yaml:"listen"`
	// DataDir holds the store, the signing key (by default), the admin
	// credential, the generated certificate and the token deny list.
	DataDir string `yaml:"data_dir"`
	TLS     TLS    `yaml:"tls"`
	// Timeouts of the HTTP server.
	Timeouts Timeouts `yaml:"timeouts"`
	Log      Log      `yaml:"log"`
	Tokens   Tokens   `yaml:"tokens"`
	Store    Store    `yaml:"store"`
	Audit    Audit    `yaml:"audit"`
	// DefaultStrategies are created at start when no strategy has their
	// name; existing ones (edited or not) are left alone.
	DefaultStrategies []strategy.Strategy `yaml:"default_strategies"`
}

// TLS is the server's certificate: given, or generated in the data dir.
type TLS struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// SANs are extra names for the generated certificate.
	SANs []string `yaml:"sans"`
	// InsecureHTTP serves plain HTTP (tests, or behind a TLS proxy).
	InsecureHTTP bool `yaml:"insecure_http"`
}

// Timeouts bound the HTTP server's connections (Go's http.Server fields).
// Write does not apply to watch streams, which stay open.
type Timeouts struct {
	ReadHeader time.Duration `yaml:"read_header"`
	Read       time.Duration `yaml:"read"`
	Write      time.Duration `yaml:"write"`
	Idle       time.Duration `yaml:"idle"`
	// Shutdown is how long a stop waits for requests in flight.
	Shutdown time.Duration `yaml:"shutdown"`
	// WatchKeepalive is the period of comments on idle watch streams.
	WatchKeepalive time.Duration `yaml:"watch_keepalive"`
}

// Log is the server's log.
type Log struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is text or json (one object a line, for log shippers).
	Format string `yaml:"format"`
}

// Tokens are the lifetimes of the tokens the server mints by default and
// the key it signs them with.
type Tokens struct {
	// LoginTTL: tokens from POST /api/v1/auth/token.
	LoginTTL time.Duration `yaml:"login_ttl"`
	// AgentTTL: agent tokens from POST /api/v1/tokens.
	AgentTTL time.Duration `yaml:"agent_ttl"`
	// TTL: admin and viewer tokens from POST /api/v1/tokens.
	TTL time.Duration `yaml:"ttl"`
	// SigningKey is the Ed25519 key (PKCS#8 PEM), created if missing;
	// default <data_dir>/signing.key.
	SigningKey string `yaml:"signing_key"`
}

// Store is where strategies and nodes are kept.
type Store struct {
	// Kind is bolt (a file in data_dir) or kubernetes.
	Kind       string `yaml:"kind"`
	Kubeconfig string `yaml:"kubeconfig"`
	Namespace  string `yaml:"namespace"`
}

// Audit is the audit history of changes (GET /api/v2/audit).
type Audit struct {
	// MaxEntries is how many entries the store keeps; the oldest go first.
	MaxEntries int `yaml:"max_entries"`
}

// Token lifetime bounds (the signer's: internal/auth.MinTTL, MaxTTL).
const (
	minTokenTTL = time.Minute
	maxTokenTTL = 5 * 365 * 24 * time.Hour
)

// DefaultListen is where `swiftlane api` serves (HTTPS) unless told
// otherwise; DefaultAPIURL, the agents' default server, points at it.
const DefaultListen = "127.0.0.1:8443"

// DefaultAPIServer is the configuration without a file.
func DefaultAPIServer() APIServer {
	return APIServer{
		Listen:   DefaultListen,
		DataDir:  "/var/lib/swiftlane",
		Timeouts: Timeouts{ReadHeader: 10 * time.Second, Idle: 2 * time.Minute, Shutdown: 5 * time.Second, WatchKeepalive: 15 * time.Second},
		Log:      Log{Level: "info", Format: "text"},
		Tokens:   Tokens{LoginTTL: 12 * time.Hour, AgentTTL: 24 * time.Hour, TTL: 12 * time.Hour},
		Store:    Store{Kind: "bolt"},
		Audit:    Audit{MaxEntries: apitypes.DefaultAuditSize},
	}
}

// LoadAPIServer reads and validates an API server config file over the
// defaults. Errors name the key and its line.
func LoadAPIServer(path string) (APIServer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return APIServer{}, fmt.Errorf("config: %w", err)
	}
	c, err := ParseAPIServer(data)
	if err != nil {
		return APIServer{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// ParseAPIServer decodes YAML over the defaults and validates it.
func ParseAPIServer(data []byte) (APIServer, error) {
	c := DefaultAPIServer()
	err := decodeFile(data, &c, c.Validate)
	return c, err
}

// Validate checks values; the error is a *strategy.FieldError naming the key.
func (c *APIServer) Validate() error {
	if _, port, err := net.SplitHostPort(c.Listen); err != nil || port == "" {
		return &strategy.FieldError{Field: "listen", Msg: fmt.Sprintf("%q is not host:port: use e.g. 127.0.0.1:8443 or :8443", c.Listen)}
	}
	if c.DataDir == "" {
		return &strategy.FieldError{Field: "data_dir", Msg: "empty: use a directory, e.g. /var/lib/swiftlane"}
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		return &strategy.FieldError{Field: "tls.key", Msg: "tls.cert and tls.key go together: set both, or neither to use the generated certificate"}
	}
	if c.TLS.InsecureHTTP && c.TLS.Cert != "" {
		return &strategy.FieldError{Field: "tls.insecure_http", Msg: "true with tls.cert: drop one of them"}
	}
	for _, d := range []struct {
		key      string
		v        time.Duration
		min, max time.Duration
		example  string
	}{
		{"timeouts.read_header", c.Timeouts.ReadHeader, time.Second, time.Hour, "10s"},
		{"timeouts.read", c.Timeouts.Read, 0, time.Hour, "30s"},
		{"timeouts.write", c.Timeouts.Write, 0, time.Hour, "30s"},
		{"timeouts.idle", c.Timeouts.Idle, 0, 24 * time.Hour, "2m"},
		{"timeouts.shutdown", c.Timeouts.Shutdown, 0, 10 * time.Minute, "5s"},
		{"timeouts.watch_keepalive", c.Timeouts.WatchKeepalive, time.Second, 10 * time.Minute, "15s"},
		{"tokens.login_ttl", c.Tokens.LoginTTL, minTokenTTL, maxTokenTTL, "12h"},
		{"tokens.agent_ttl", c.Tokens.AgentTTL, minTokenTTL, maxTokenTTL, "24h"},
		{"tokens.ttl", c.Tokens.TTL, minTokenTTL, maxTokenTTL, "12h"},
	} {
		if d.v < d.min || d.v > d.max {
			zero := ""
			if d.min == 0 {
				zero = " (0: no limit)"
			}
			return &strategy.FieldError{Field: d.key, Msg: fmt.Sprintf("%s is out of range: use %s..%s%s, e.g. %s", d.v, d.min, d.max, zero, d.example)}
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return &strategy.FieldError{Field: "log.level", Msg: fmt.Sprintf("%q is unknown: use debug, info, warn or error", c.Log.Level)}
	}
	if c.Log.Format != "text" && c.Log.Format != "json" {
		return &strategy.FieldError{Field: "log.format", Msg: fmt.Sprintf("%q is unknown: use text or json", c.Log.Format)}
	}
	switch c.Store.Kind {
	case "bolt":
		if c.Store.Kubeconfig != "" || c.Store.Namespace != "" {
			return &strategy.FieldError{Field: "store.kind", Msg: "bolt with store.kubeconfig or store.namespace: those are for kind kubernetes"}
		}
	case "kubernetes":
	default:
		return &strategy.FieldError{Field: "store.kind", Msg: fmt.Sprintf("%q is unknown: use bolt or kubernetes", c.Store.Kind)}
	}
	if n := c.Audit.MaxEntries; n < 1 || n > apitypes.MaxAuditSize {
		return &strategy.FieldError{Field: "audit.max_entries", Msg: fmt.Sprintf("%d is out of range: use 1..%d, e.g. %d", n, apitypes.MaxAuditSize, apitypes.DefaultAuditSize)}
	}
	names := map[string]int{}
	for i := range c.DefaultStrategies {
		st := &c.DefaultStrategies[i]
		key := fmt.Sprintf("default_strategies[%d]", i)
		if st.Name == "" {
			return &strategy.FieldError{Field: key + ".name", Msg: "missing: a default strategy needs a name (it is created when no strategy has it)"}
		}
		if err := st.Validate(); err != nil {
			var fe *strategy.FieldError
			if errors.As(err, &fe) {
				return &strategy.FieldError{Field: key + "." + fe.Field, Msg: fe.Msg}
			}
			return &strategy.FieldError{Field: key, Msg: err.Error()}
		}
		if j, dup := names[st.Name]; dup {
			return &strategy.FieldError{Field: key + ".name", Msg: fmt.Sprintf("%q is already used by default_strategies[%d]: names must be unique", st.Name, j)}
		}
		names[st.Name] = i
	}
	return nil
}

// decodeFile decodes YAML into v over its current values (the defaults),
// refusing unknown keys and bad values by key and line, then validates;
// a validation error gets the line of its key.
func decodeFile(data []byte, v any, validate func() error) error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return err
	}
	if len(root.Content) == 0 { // empty file
		return validate()
	}
	if err := checkKeys(root.Content[0], reflect.TypeOf(v).Elem(), ""); err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return friendlyDecodeError(err)
	}
	err := validate()
	var fe *strategy.FieldError
	if errors.As(err, &fe) && fe.Line == 0 {
		fe.Line = keyLine(root.Content[0], fe.Field)
	}
	return err
}

// keyLine finds the line of a dotted key path (with [i] indexes) in a
// document; the nearest enclosing key's line if the key itself is absent
// (a default the file did not set is not on any line: 0).
func keyLine(n *yaml.Node, key string) int {
	line := 0
	for _, part := range strings.Split(key, ".") {
		name, idx, _ := strings.Cut(part, "[")
		if n == nil || n.Kind != yaml.MappingNode {
			return line
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == name {
				line, next = n.Content[i].Line, n.Content[i+1]
				break
			}
		}
		if next == nil {
			return line
		}
		n = next
		for idx != "" {
			var num string
			num, idx, _ = strings.Cut(idx, "]")
			idx = strings.TrimPrefix(idx, "[")
			i, err := strconv.Atoi(num)
			if err != nil || n.Kind != yaml.SequenceNode || i >= len(n.Content) {
				return line
			}
			n = n.Content[i]
			line = n.Line
		}
	}
	return line
}

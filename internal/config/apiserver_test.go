// SPDX-License-Identifier: Apache-2.0

package config

import (
	"strings"
	"testing"
	"time"
)

func TestAPIServerFile(t *testing.T) {
	c, err := ParseAPIServer([]byte(`
listen: 0.0.0.0:9443
data_dir: /srv/swiftlane
tls: {cert: /etc/tls/api.crt, key: /etc/tls/api.key}
timeouts:
  read_header: 5s
  write: 30s
log: {level: debug, format: json}
tokens:
  login_ttl: 1h
  agent_ttl: 720h
  signing_key: /etc/swiftlane/signing.key
audit: {max_entries: 500}
default_strategies:
  - name: gnb
    class: critical
    command_regex: nr-gnb
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "0.0.0.0:9443" || c.TLS.Key != "/etc/tls/api.key" || c.Timeouts.ReadHeader != 5*time.Second || c.Timeouts.Write != 30*time.Second ||
		c.Timeouts.Idle != 2*time.Minute || c.Log.Format != "json" || c.Tokens.AgentTTL != 720*time.Hour || c.Tokens.TTL != 12*time.Hour ||
		c.Tokens.SigningKey != "/etc/swiftlane/signing.key" || len(c.DefaultStrategies) != 1 || c.DefaultStrategies[0].Name != "gnb" || c.Store.Kind != "bolt" || c.Audit.MaxEntries != 500 {
		t.Fatalf("parsed: %+v", c)
	}
	if d, err := ParseAPIServer(nil); err != nil || d.Listen != "127.0.0.1:8443" || d.Audit.MaxEntries != 10000 {
		t.Fatalf("empty file: %+v %v", d, err)
	}
}

// TestAPIServerErrorsNameKeyAndLine: every refusal names the key and the
// line it is on, and says what to write instead.
func TestAPIServerErrorsNameKeyAndLine(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"listen: :8443\ntimeout: 5s\n", "timeout (line 2): unknown key"},
		{"timeouts:\n  read_header: soon\n", "timeouts.read_header (line 2)"},
		{"timeouts:\n  write: 30\n", "timeouts.write (line 2)"},
		{"log:\n  level: loud\n", "log.level (line 2): \"loud\" is unknown: use debug, info, warn or error"},
		{"log:\n  format: xml\n", "log.format (line 2)"},
		{"\ntokens:\n  agent_ttl: 30s\n", "tokens.agent_ttl (line 3): 30s is out of range: use 1m0s.."},
		{"listen: nowhere\n", "listen (line 1): \"nowhere\" is not host:port"},
		{"tls:\n  cert: a.crt\n", "tls.key (line 1): tls.cert and tls.key go together"},
		{"store:\n  kind: etcd\n", "store.kind (line 2)"},
		{"audit:\n  max_entries: 0\n", "audit.max_entries (line 2): 0 is out of range: use 1..100000"},
		{"default_strategies:\n  - class: high\n    command_regex: x\n", "default_strategies[0].name (line 2): missing"},
		{"default_strategies:\n  - name: a\n    class: high\n    command_regex: '('\n", "default_strategies[0].command_regex (line 4)"},
		{"default_strategies:\n  - name: a\n    class: high\n    command_regex: x\n    execution_time: 10\n", "default_strategies[0].execution_time (line 5): 10 ns is out of range"},
	} {
		_, err := ParseAPIServer([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.file, err, tc.want)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/swiftlane/swiftlane/internal/strategy"
)

func TestAutomaticKeys(t *testing.T) {
	cfg, err := Parse([]byte(`
automatic:
  enabled: true
  functions: [gtp_encap_recv, gtp5g_encap_recv]
  class: high
  slice_ns: 200000
  idle_timeout_ms: 2000
  companions: ['(^|/)ping( |$)', 'nr-ue']
  tun_devices: ['ue*', 'tun[0-3]']
`))
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Automatic
	if !a.Enabled || a.Class != strategy.High || a.SliceNs != 200000 || a.IdleTimeoutMs != 2000 ||
		len(a.Functions) != 2 || len(a.Companions) != 2 || len(a.TUNDevices) != 2 {
		t.Fatalf("got %+v", a)
	}
	def, _ := Parse(nil)
	if def.Automatic.Enabled || def.Automatic.Class != strategy.Critical || def.Automatic.IdleTimeoutMs != 5000 ||
		len(def.Automatic.TUNDevices) != 1 || def.Automatic.TUNDevices[0] != "uesimtun*" {
		t.Fatalf("defaults: %+v", def.Automatic)
	}
	// An explicit empty list turns TUN tracing off rather than keeping the default.
	off, err := Parse([]byte("automatic:\n  tun_devices: []\n"))
	if err != nil || len(off.Automatic.TUNDevices) != 0 {
		t.Fatalf("tun_devices: [] gave %v (%v)", off.Automatic.TUNDevices, err)
	}
}

func TestAutomaticErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ yaml, key, hint string }{
		{"automatic:\n  class: urgent\n", "automatic.class", "critical"},
		{"automatic:\n  slice_ns: 10\n", "automatic.slice_ns", "out of range"},
		{"automatic:\n  idle_timeout_ms: 5\n", "automatic.idle_timeout_ms", "100..3600000"},
		{"automatic:\n  functions: ['gtp encap']\n", "automatic.functions[0]", "kernel function name"},
		{"automatic:\n  companions: ['(']\n", "automatic.companions[0]", "RE2"},
		{"automatic:\n  tun_devices: [ok, 'ue[']\n", "automatic.tun_devices[1]", "shell pattern"},
		{"automatic:\n  enable: true\n", "automatic.enable", "known keys here"},
	} {
		_, err := Parse([]byte(tc.yaml))
		var fe *strategy.FieldError
		if !errors.As(err, &fe) || fe.Field != tc.key || !strings.Contains(err.Error(), tc.hint) {
			t.Errorf("%q: got %v, want key %s mentioning %q", tc.yaml, err, tc.key, tc.hint)
		}
	}
}

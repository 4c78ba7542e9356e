// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The lb command's flag handling up to the point it would load BPF or
// contact a cluster (the source and the balancer are tested in their
// packages).
func TestLBFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	node := write("node.yaml", "interfaces: [eth0]\n")
	withServices := write("services.yaml", `
interfaces: [eth0]
services:
  - {name: web, clusterIP: 10.96.0.10, ports: [{port: 80}], endpoints: [{address: 10.244.1.2}]}
`)
	for _, tc := range []struct {
		args          []string
		out, errorHas string
	}{
		{args: []string{"--config", withServices, "--check"}, out: "1 services OK"},
		{args: []string{"--source", "kubernetes", "--config", node, "--check"}, out: "node settings OK"},
		{args: []string{"--source", "kubernetes", "--config", withServices, "--check"}, errorHas: "services: not used with --source kubernetes"},
		{args: []string{"--source", "kubernetes", "--config", node, "--kubeconfig", filepath.Join(dir, "missing")}, errorHas: "--kubeconfig " + filepath.Join(dir, "missing")},
		{args: []string{"--source", "etcd", "--config", node}, errorHas: `--source "etcd" is unknown`},
		{args: []string{"--source", "kubernetes"}, errorHas: "--config: required"},
		{args: []string{"--cleanup", "--pin-dir", ""}, errorHas: "--cleanup: needs --pin-dir"},
		{args: []string{"--config", withServices, "--pin-dir", filepath.Join(dir, "pins")}, errorHas: "is not on a bpf filesystem"},
	} {
		c := newLBCmd()
		var out bytes.Buffer
		c.SetOut(&out)
		c.SetErr(&out)
		c.SetArgs(tc.args)
		err := c.Execute()
		switch {
		case tc.errorHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errorHas)):
			t.Errorf("lb %v: error %v, want one containing %q", tc.args, err, tc.errorHas)
		case tc.errorHas == "" && (err != nil || !strings.Contains(out.String(), tc.out)):
			t.Errorf("lb %v: %q (err %v), want output containing %q", tc.args, out.String(), err, tc.out)
		}
	}
}

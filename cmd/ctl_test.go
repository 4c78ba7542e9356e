// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadStrategiesForms(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, body := range map[string]string{
		"one.yaml":  "name: gnb\nclass: critical\ncommand_regex: nr-gnb\n",
		"list.yaml": "- name: gnb\n  class: critical\n  command_regex: nr-gnb\n  node_selector: {zone: a}\n",
		"wrap.json": `{"strategies":[{"name":"gnb","priority":true,"command_regex":"nr-gnb","namespaces":["free5gc"]}]}`,
	} {
		list, err := readStrategies(write(name, body))
		if err != nil || len(list) != 1 || list[0].Name != "gnb" || list[0].EffectiveClass().String() != "critical" {
			t.Errorf("%s: %+v %v", name, list, err)
		}
	}
	for name, tc := range map[string]struct{ body, want string }{
		"unknown.yaml": {"name: gnb\nclass: critical\ncommand_regex: x\ncolour: red\n", `unknown field "colour"`},
		"regex.yaml":   {"name: gnb\nclass: critical\ncommand_regex: '('\n", "strategies[0].command_regex"},
		"slice.yaml":   {"- name: gnb\n  class: high\n  command_regex: x\n  execution_time: 10\n", "strategies[0].execution_time"},
	} {
		if _, err := readStrategies(write(name, tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}

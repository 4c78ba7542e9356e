// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// testdata/layered-stats.json is not captured from a run (no VM here): it is
// an answer of scx_layered 1.1.4's stats server written from its source,
// src/stats.rs (SysStats and LayerStats, serde's field names, every field)
// inside scx_stats 1.1.4's StatsResponse envelope ({"errno", "args":
// {"resp"}}), with numbers of the shape a saturated 2-CPU guest gives.
func statsAnswer(t *testing.T, critTasks int) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/layered-stats.json")
	if err != nil {
		t.Fatal(err)
	}
	if critTasks != 14 {
		b = bytes.Replace(b, []byte(`"tasks": 14,`), []byte(`"tasks": `+itoa(critTasks)+`,`), 1)
	}
	var line bytes.Buffer
	if err := json.Compact(&line, b); err != nil {
		t.Fatal(err)
	}
	return append(line.Bytes(), '\n')
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestParseLayeredStats(t *testing.T) {
	layers, err := parseLayeredStats(statsAnswer(t, 14))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]LayerStat{"critical": {Tasks: 14, Util: 21.4, Total: 3610}, "normal": {Tasks: 131, Util: 176.8, Total: 5691}}
	if len(layers) != 2 || layers["critical"] != want["critical"] || layers["normal"] != want["normal"] {
		t.Errorf("got %+v, want %+v", layers, want)
	}
	for _, bad := range []string{
		`{"errno":22,"args":{"resp":"unknown stat target"}}`,
		`{"errno":0,"args":{"resp":{"total":3}}}`,
		`tot=   9301 local_sel/enq= 9.40/0.80`,
	} {
		if _, err := parseLayeredStats([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestCriticalLayer(t *testing.T) {
	name, prefixes, err := criticalLayer(layeredConfig)
	if err != nil || name != "critical" || !slices.Equal(prefixes, []string{"swiftlane", "nginx"}) {
		t.Errorf("layered.json: %q %q %v", name, prefixes, err)
	}
	and := `[{"name":"c","matches":[[{"CommPrefix":"a"},{"NiceBelow":0}]],"kind":{"Open":{}}},{"name":"n","matches":[[]],"kind":{"Open":{}}}]`
	if _, _, err := criticalLayer([]byte(and)); err == nil || !strings.Contains(err.Error(), "CommPrefix") {
		t.Errorf("an AND match: %v", err)
	}
	if _, _, err := criticalLayer([]byte(`[{"name":"only","matches":[[]]}]`)); err == nil {
		t.Error("one layer: no error")
	}
}

func TestMatchingThreads(t *testing.T) {
	root := t.TempDir()
	for path, comm := range map[string]string{
		"10/task/10/comm": "swiftlane", "10/task/11/comm": "swiftlane", "12/task/12/comm": "nginx",
		"13/task/13/comm": "stress-ng-cpu", "14/task/14/comm": "bench-sched", "self/task/1/comm": "swiftlane",
	} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n := matchingThreads(root, []string{"swiftlane", "nginx"}); n != 3 {
		t.Errorf("%d threads, want 3 (self/ is not a pid)", n)
	}
	// The real /proc: this test binary's own threads.
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Skip(err)
	}
	if n := matchingThreads("/proc", []string{strings.TrimSpace(string(comm))}); n < 1 {
		t.Errorf("/proc: %d threads named %q", n, comm)
	}
}

// watchLayered against a server speaking scx_stats' protocol on a real UNIX
// socket: the critical layer counts this test binary's threads (its comm as
// the config's prefix), so the verdict follows the task count it reports.
func TestWatchLayered(t *testing.T) {
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Skip(err)
	}
	config := `[{"name":"critical","matches":[[{"CommPrefix":"` + strings.TrimSpace(string(comm)) + `"}]],"kind":{"Open":{"preempt":true}}},` +
		`{"name":"normal","matches":[[]],"kind":{"Open":{}}}]`
	for _, tc := range []struct {
		tasks int
		in    bool
	}{{1000, true}, {0, false}} {
		socket := filepath.Join(t.TempDir(), "stats")
		serveLayeredStats(t, socket, statsAnswer(t, tc.tasks))
		end := watchLayered(socket, []byte(config), time.Hour)
		c := end()
		if c.Error != "" || c.Samples != 1 || c.WithProbe != 1 || c.ProbeInCritical != tc.in {
			t.Errorf("critical tasks %d: %+v", tc.tasks, c)
		}
		if l := c.Layers["critical"]; l == nil || l.TasksMax != tc.tasks || l.UtilPct != 21.4 {
			t.Errorf("critical tasks %d: layer %+v", tc.tasks, l)
		}
		if tc.in != (c.ProbeLayer == "critical") || tc.in == strings.Contains(c.Verdict, "NOT IN LAYER") {
			t.Errorf("critical tasks %d: %q, %q", tc.tasks, c.ProbeLayer, c.Verdict)
		}
	}
	c := watchLayered(filepath.Join(t.TempDir(), "none"), layeredConfig, time.Hour)()
	if c.ProbeInCritical || c.ProbeLayer != "unknown" || !strings.Contains(c.Error, "stats server") {
		t.Errorf("no server: %+v", c)
	}
}

// serveLayeredStats answers every stats request on socket with answer.
func serveLayeredStats(t *testing.T, socket string, answer []byte) {
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		rd := bufio.NewReader(conn)
		for {
			line, err := rd.ReadBytes('\n')
			if err != nil {
				return
			}
			var req struct {
				Req  string            `json:"req"`
				Args map[string]string `json:"args"`
			}
			if json.Unmarshal(line, &req) != nil || req.Req != "stats" || req.Args["target"] != "top" {
				conn.Write([]byte(`{"errno":22,"args":{"resp":"bad request"}}` + "\n"))
				continue
			}
			conn.Write(answer)
		}
	}()
}

// A probe outside the critical layer fails the variant under "layered",
// and the merge says so for the row.
func TestLayeredInReport(t *testing.T) {
	bad := &LayeredCheck{CriticalLayer: "critical", ProbeLayer: "not critical", Verdict: "PROBE NOT IN LAYER critical"}
	boot := BootReport{Boot: 1, Kernel: "7.3.4", CPUs: 2, Order: []string{"scx_layered"}, Variants: map[string]*VariantRun{
		"scx_layered": {Metrics: map[string]float64{}, Layered: bad, Errors: map[string]string{"layered": bad.Verdict}},
	}}
	var b strings.Builder
	printBoot(&b, boot)
	if !strings.Contains(b.String(), "scx_layered: layered: PROBE NOT IN LAYER") {
		t.Errorf("boot table:\n%s", b.String())
	}
	rep, err := mergeReports([]BootReport{boot})
	if err != nil {
		t.Fatal(err)
	}
	v := rep.Variants["scx_layered"]
	if in, _ := v["probe_in_critical_layer"].(bool); in || !slices.Contains(v["errors"].([]string), "boot 1: layered: PROBE NOT IN LAYER critical") {
		t.Errorf("merged: %v %v", v["probe_in_critical_layer"], v["errors"])
	}
	out, err := json.Marshal(v["layered"])
	if err != nil || !strings.Contains(string(out), `"boot":1,`) || !strings.Contains(string(out), `"probe_layer":"not critical"`) {
		t.Errorf("layered in JSON: %s %v", out, err)
	}
}

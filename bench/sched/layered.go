// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// scx_layered serves its statistics (what `scx_layered --monitor` prints)
// on a UNIX socket through the scx_stats crate: one JSON request per line,
// {"req":"stats","args":{"target":"top"}}, answered by one JSON line,
// {"errno":0,"args":{"resp":SysStats}}. Each answer covers the time since
// the connection's previous one; SysStats.layers has a LayerStats per layer
// (scx_layered's src/stats.rs). The benchmark asks it once a second through
// the probe's loaded phase to see which layer the probe's tasks are in.

// LayerStat is the part of one layer's LayerStats the check uses.
type LayerStat struct {
	// Tasks is the number of tasks in the layer when the report was made.
	Tasks int `json:"tasks"`
	// Util is the layer's CPU use over the period, in % of one CPU.
	Util float64 `json:"util"`
	// Total is the layer's scheduling events over the period.
	Total uint64 `json:"total"`
}

// parseLayeredStats reads one answer of scx_layered's stats server.
func parseLayeredStats(line []byte) (map[string]LayerStat, error) {
	var resp struct {
		Errno int `json:"errno"`
		Args  struct {
			Resp json.RawMessage `json:"resp"`
		} `json:"args"`
	}
	if err := json.Unmarshal(line, &resp); err != nil {
		return nil, fmt.Errorf("scx_layered stats: %w: %.200q", err, line)
	}
	if resp.Errno != 0 {
		return nil, fmt.Errorf("scx_layered stats: errno %d: %.200s", resp.Errno, resp.Args.Resp)
	}
	var sys struct {
		Layers map[string]LayerStat `json:"layers"`
	}
	if err := json.Unmarshal(resp.Args.Resp, &sys); err != nil {
		return nil, fmt.Errorf("scx_layered stats: %w: %.200q", err, line)
	}
	if len(sys.Layers) == 0 {
		return nil, fmt.Errorf("scx_layered stats: no layers in %.200q", line)
	}
	return sys.Layers, nil
}

// criticalLayer is the layer of an scx_layered config the benchmark's
// latency-sensitive processes belong in (the first: layered.json's
// preempting one), and the comm prefixes it matches.
func criticalLayer(config []byte) (name string, prefixes []string, err error) {
	var layers []struct {
		Name    string                         `json:"name"`
		Matches [][]map[string]json.RawMessage `json:"matches"`
	}
	if err := json.Unmarshal(config, &layers); err != nil {
		return "", nil, fmt.Errorf("scx_layered config: %w", err)
	}
	if len(layers) < 2 {
		return "", nil, errors.New("scx_layered config: want the critical layer first and a catch-all last")
	}
	for _, and := range layers[0].Matches {
		if len(and) != 1 {
			return "", nil, fmt.Errorf("scx_layered config: layer %q: the check counts threads by CommPrefix matches only, not %d-term ANDs", layers[0].Name, len(and))
		}
		var prefix string
		if err := json.Unmarshal(and[0]["CommPrefix"], &prefix); err != nil || prefix == "" {
			return "", nil, fmt.Errorf("scx_layered config: layer %q: the check counts threads by CommPrefix matches only", layers[0].Name)
		}
		prefixes = append(prefixes, prefix)
	}
	return layers[0].Name, prefixes, nil
}

// matchingThreads counts the threads under procRoot whose comm starts with
// one of prefixes: the tasks the critical layer should hold.
func matchingThreads(procRoot string, prefixes []string) int {
	comms, _ := filepath.Glob(filepath.Join(procRoot, "[0-9]*", "task", "[0-9]*", "comm"))
	n := 0
	for _, path := range comms {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // exited since the glob
		}
		comm := strings.TrimSpace(string(b))
		if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(comm, p) }) {
			n++
		}
	}
	return n
}

// LayeredCheck is where scx_layered's own stats put the probe's tasks
// during the probe's loaded phase.
type LayeredCheck struct {
	Socket string `json:"socket"`
	// CriticalLayer is the layer the probe belongs in, Matches its comm
	// prefixes.
	CriticalLayer string   `json:"critical_layer"`
	Matches       []string `json:"comm_prefixes"`
	Samples       int      `json:"samples"`
	// Layers sums up each layer's reports over the phase.
	Layers map[string]*LayerSummary `json:"layers,omitempty"`
	// MatchingThreads is the most threads with a matching comm (the probe's
	// two processes) seen in /proc at a sample; WithProbe the samples that
	// saw any, Covered those in which the critical layer held at least as
	// many tasks as there were such threads.
	MatchingThreads int `json:"matching_threads"`
	WithProbe       int `json:"samples_with_probe"`
	Covered         int `json:"samples_covered"`
	// ProbeInCritical is the verdict; ProbeLayer and Verdict say it in words.
	ProbeInCritical bool   `json:"probe_in_critical_layer"`
	ProbeLayer      string `json:"probe_layer"`
	Verdict         string `json:"verdict"`
	Error           string `json:"error,omitempty"`
}

// LayerSummary is one layer over the phase's samples.
type LayerSummary struct {
	TasksMin   int     `json:"tasks_min"`
	TasksMax   int     `json:"tasks_max"`
	UtilPct    float64 `json:"util_pct"`
	EventsPerS float64 `json:"events_per_s"`
	events     uint64
	utilSum    float64
}

// layeredSample is one report and what /proc held at it.
type layeredSample struct {
	layers   map[string]LayerStat
	matching int
}

// summarize fills the check from its samples over seconds of reports.
func (c *LayeredCheck) summarize(samples []layeredSample, seconds float64) {
	c.Samples = len(samples)
	c.Layers = map[string]*LayerSummary{}
	for _, s := range samples {
		c.MatchingThreads = max(c.MatchingThreads, s.matching)
		if s.matching > 0 {
			c.WithProbe++
			if s.layers[c.CriticalLayer].Tasks >= s.matching {
				c.Covered++
			}
		}
		for name, l := range s.layers {
			sum := c.Layers[name]
			if sum == nil {
				sum = &LayerSummary{TasksMin: l.Tasks}
				c.Layers[name] = sum
			}
			sum.TasksMin, sum.TasksMax = min(sum.TasksMin, l.Tasks), max(sum.TasksMax, l.Tasks)
			sum.events += l.Total
			sum.utilSum += l.Util
		}
	}
	for _, sum := range c.Layers {
		sum.UtilPct = sum.utilSum / float64(len(samples))
		if seconds > 0 {
			sum.EventsPerS = float64(sum.events) / seconds
		}
	}
	crit := c.Layers[c.CriticalLayer]
	switch {
	case c.Error != "" && len(samples) == 0:
		c.ProbeLayer, c.Verdict = "unknown", "scx_layered's stats could not be read: "+c.Error
		return
	case crit == nil:
		c.ProbeLayer = "not " + c.CriticalLayer
		c.Verdict = fmt.Sprintf("scx_layered reported no layer %q (layers %s)", c.CriticalLayer, strings.Join(sortedKeys(c.Layers), ", "))
		return
	}
	// Most samples, not all: a thread can start or end between the kernel's
	// count and the walk of /proc.
	c.ProbeInCritical = c.WithProbe > 0 && 2*c.Covered > c.WithProbe && crit.events > 0
	if c.ProbeInCritical {
		c.ProbeLayer = c.CriticalLayer
		c.Verdict = fmt.Sprintf("the probe ran in layer %s: it held %d-%d tasks against at most %d threads named %s in %d of %d samples, %.0f events/s, %.1f%% of a CPU",
			c.CriticalLayer, crit.TasksMin, crit.TasksMax, c.MatchingThreads, strings.Join(c.Matches, "*/")+"*", c.Covered, c.WithProbe, crit.EventsPerS, crit.UtilPct)
		return
	}
	c.ProbeLayer = "not " + c.CriticalLayer
	c.Verdict = fmt.Sprintf("PROBE NOT IN LAYER %s: it held %d-%d tasks against up to %d threads named %s (enough in %d of %d samples), %.0f events/s: this scx_layered row does not measure a critical layer",
		c.CriticalLayer, crit.TasksMin, crit.TasksMax, c.MatchingThreads, strings.Join(c.Matches, "*/")+"*", c.Covered, c.WithProbe, crit.EventsPerS)
}

// watchLayered samples scx_layered's stats every interval until the
// returned func is called, which returns the check.
func watchLayered(socket string, config []byte, every time.Duration) (end func() *LayeredCheck) {
	c := &LayeredCheck{Socket: socket}
	layer, prefixes, err := criticalLayer(config)
	if err != nil {
		c.Error = err.Error()
		return func() *LayeredCheck { c.summarize(nil, 0); return c }
	}
	c.CriticalLayer, c.Matches = layer, prefixes
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var samples []layeredSample
	var seconds float64
	wg.Add(1)
	go func() {
		defer wg.Done()
		samples, seconds, err = pollLayered(socket, prefixes, every, stop)
		if err != nil {
			c.Error = err.Error()
		}
	}()
	return func() *LayeredCheck {
		close(stop)
		wg.Wait()
		c.summarize(samples, seconds)
		return c
	}
}

// pollLayered asks the stats server for a report every interval and once
// more when stop closes, and returns the reports after the first (which
// covers the time before the phase) and the seconds they cover.
func pollLayered(socket string, prefixes []string, every time.Duration, stop <-chan struct{}) ([]layeredSample, float64, error) {
	conn, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return nil, 0, fmt.Errorf("scx_layered's stats server: %w", err)
	}
	defer conn.Close()
	rd := bufio.NewReader(conn)
	ask := func() (map[string]LayerStat, error) {
		// Generous: a saturated TCG guest can take seconds to schedule the
		// scheduler's stats thread.
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write([]byte(`{"req":"stats","args":{"target":"top"}}` + "\n")); err != nil {
			return nil, err
		}
		line, err := rd.ReadBytes('\n')
		if err != nil {
			return nil, err
		}
		return parseLayeredStats(line)
	}
	if _, err := ask(); err != nil {
		return nil, 0, err
	}
	began := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var samples []layeredSample
	for done := false; !done; {
		select {
		case <-tick.C:
		case <-stop:
			done = true
		}
		layers, err := ask()
		if err != nil {
			return samples, time.Since(began).Seconds(), err
		}
		samples = append(samples, layeredSample{layers, matchingThreads("/proc", prefixes)})
	}
	return samples, time.Since(began).Seconds(), nil
}

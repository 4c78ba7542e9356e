// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"os"
	"testing"
)

// The report keeps every key of the committed bench/results/userspace.json
// (what readers of it use) and gains boots.
func TestReportKeys(t *testing.T) {
	b, err := os.ReadFile("../results/userspace.json")
	if err != nil {
		t.Fatal(err)
	}
	var committed map[string]json.RawMessage
	if err := json.Unmarshal(b, &committed); err != nil {
		t.Fatal(err)
	}
	full := &Variant{Throughput: 1, RunsSec: []float64{1}, DecisionsPerS: 1, LoopCPUPct: 1, CriticalAvgUs: 1,
		CriticalP99Us: 1, Counters: map[string]float64{"x": 1}, Error: "e", Description: "d"}
	rep := Report{Boots: 1, Order: []string{"v"}, Variants: map[string]*Variant{"v": full}, UserVsKernelPct: 1, CriticalAvgRatio: 1}
	var now map[string]json.RawMessage
	if b, err = json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &now); err != nil {
		t.Fatal(err)
	}
	for k := range committed {
		if _, ok := now[k]; !ok {
			t.Errorf("key %q of userspace.json is gone", k)
		}
	}
	if string(now["boots"]) != "1" {
		t.Errorf("boots: %s", now["boots"])
	}
	var variants map[string]map[string]json.RawMessage
	if err := json.Unmarshal(committed["variants"], &variants); err != nil {
		t.Fatal(err)
	}
	var fullKeys map[string]json.RawMessage
	if b, err = json.Marshal(full); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(b, &fullKeys)
	for name, v := range variants {
		for k := range v {
			if _, ok := fullKeys[k]; !ok {
				t.Errorf("variant %s: key %q is gone", name, k)
			}
		}
	}
}

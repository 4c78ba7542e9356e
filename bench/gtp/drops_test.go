// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"os/exec"
	"testing"
)

// The parsers over this machine's own counters, as ip and the kernel print them.
func TestDropCounterParsers(t *testing.T) {
	out := map[string]float64{}
	b, err := exec.Command("ip", "-s", "-j", "link", "show", "lo").Output()
	if err != nil {
		t.Skipf("ip: %v", err)
	}
	linkDrops(b, "here", out)
	for _, k := range []string{"here/lo/rx_dropped", "here/lo/rx_errors", "here/lo/tx_dropped", "here/lo/tx_errors"} {
		if _, ok := out[k]; !ok {
			t.Errorf("no %s in %v", k, out)
		}
	}
	snmp, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	udpErrors(string(snmp), "here", out)
	for _, k := range []string{"here/udp/InErrors", "here/udp/RcvbufErrors", "here/udp/SndbufErrors"} {
		if _, ok := out[k]; !ok {
			t.Errorf("no %s in %v", k, out)
		}
	}
}

func TestDropDeltas(t *testing.T) {
	d := dropDeltas(map[string]float64{"a": 1, "b": 5, "c": 2}, map[string]float64{"a": 1, "b": 9, "c": 2, "new": 3})
	if len(d) != 1 || d["b"] != 4 {
		t.Errorf("dropDeltas = %v, want only b: 4 (a counter missing before is skipped)", d)
	}
	if dropDeltas(map[string]float64{"a": 1}, map[string]float64{"a": 1}) != nil {
		t.Error("no drops should give nil")
	}
}

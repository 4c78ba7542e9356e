// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/swiftlane/swiftlane/internal/gtplab"
	"github.com/swiftlane/swiftlane/internal/netstat"
)

// dropCounters reads where the lab can lose a packet: in each of its
// namespaces every interface's dropped and error counts (ip -s -j link),
// UDP's receive-buffer and input errors as that namespace sees them
// (/proc/net/snmp), and the kernel's per-CPU input backlog drops
// (/proc/net/softnet_stat, machine-wide). A counter that cannot be read is
// left out: the difference over a phase (dropDeltas) then skips it.
func dropCounters() map[string]float64 {
	out := map[string]float64{}
	t := gtplab.Default()
	for _, ns := range []string{t.UENetns, t.GNBNetns, t.UPFNetns} {
		if b, err := exec.Command("ip", "-n", ns, "-s", "-j", "link", "show").Output(); err == nil {
			linkDrops(b, ns, out)
		}
		if b, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/snmp").Output(); err == nil {
			udpErrors(string(b), ns, out)
		}
	}
	if b, err := os.ReadFile("/proc/net/softnet_stat"); err == nil {
		var dropped float64
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if f := strings.Fields(l); len(f) > 1 {
				n, _ := strconv.ParseUint(f[1], 16, 64)
				dropped += float64(n)
			}
		}
		out["softnet/dropped"] = dropped
	}
	return out
}

// linkDrops adds ns/ifname/{rx,tx}_{dropped,errors} from ip -s -j link.
func linkDrops(b []byte, ns string, out map[string]float64) {
	var links []struct {
		Name  string `json:"ifname"`
		Stats struct {
			RX struct{ Errors, Dropped float64 } `json:"rx"`
			TX struct{ Errors, Dropped float64 } `json:"tx"`
		} `json:"stats64"`
	}
	if json.Unmarshal(b, &links) != nil {
		return
	}
	for _, l := range links {
		p := ns + "/" + l.Name + "/"
		out[p+"rx_dropped"], out[p+"rx_errors"] = l.Stats.RX.Dropped, l.Stats.RX.Errors
		out[p+"tx_dropped"], out[p+"tx_errors"] = l.Stats.TX.Dropped, l.Stats.TX.Errors
	}
}

// udpErrors adds ns/udp/{InErrors,RcvbufErrors,SndbufErrors} from /proc/net/snmp.
func udpErrors(snmp, ns string, out map[string]float64) {
	udp := netstat.SNMP(snmp, "Udp")
	for _, k := range []string{"InErrors", "RcvbufErrors", "SndbufErrors"} {
		if v, ok := udp[k]; ok {
			out[ns+"/udp/"+k] = float64(v)
		}
	}
}

// dropDeltas is what grew between two readings: the phase's drops, nil if none.
func dropDeltas(before, after map[string]float64) map[string]float64 {
	var d map[string]float64
	for k, a := range after {
		if b, ok := before[k]; ok && a > b {
			if d == nil {
				d = map[string]float64{}
			}
			d[k] = a - b
		}
	}
	return d
}

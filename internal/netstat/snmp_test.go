// SPDX-License-Identifier: Apache-2.0

package netstat

import (
	"os"
	"testing"
)

func TestSNMP(t *testing.T) {
	text := "Ip: Forwarding DefaultTTL\nIp: 1 64\nUdp: InDatagrams InErrors RcvbufErrors\nUdp: 10 2 3\nUdpLite: InDatagrams\nUdpLite: 7\n"
	u := SNMP(text, "Udp")
	if len(u) != 3 || u["InDatagrams"] != 10 || u["InErrors"] != 2 || u["RcvbufErrors"] != 3 {
		t.Errorf("Udp = %v", u)
	}
	if len(SNMP(text, "Tcp")) != 0 {
		t.Error("a protocol not in the text has counters")
	}
	// This machine's own file, as the kernel prints it.
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		t.Skip(err)
	}
	if _, ok := SNMP(string(b), "Tcp")["ActiveOpens"]; !ok {
		t.Errorf("no Tcp ActiveOpens in /proc/net/snmp: %v", SNMP(string(b), "Tcp"))
	}
}

// SPDX-License-Identifier: Apache-2.0

// Package netstat reads the kernel's network counters as a network
// namespace shows them.
package netstat

import (
	"strconv"
	"strings"
)

// SNMP returns one protocol's counters ("Tcp", "Udp", "Ip", ...) from the
// text of /proc/net/snmp: the protocol's first row names them, the second
// holds the values. Empty if the protocol is not there.
func SNMP(text, proto string) map[string]int64 {
	m := map[string]int64{}
	var names []string
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != proto+":" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		for i, v := range f[1:] {
			if i < len(names) {
				m[names[i]], _ = strconv.ParseInt(v, 10, 64)
			}
		}
		break
	}
	return m
}

// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"strings"
	"testing"
)

// TestAgentServerList: --server takes several replicas; an entry that is
// not an http(s) URL is refused by name, with the form to use.
func TestAgentServerList(t *testing.T) {
	if err := checkServers([]string{"https://10.0.0.1:8443", "http://10.0.0.2:8080"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{nil, {"https://a:1", "10.0.0.2:8443"}, {"ftp://a"}, {"https://"}} {
		err := checkServers(bad)
		if err == nil || !strings.Contains(err.Error(), "--server") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// SPDX-License-Identifier: Apache-2.0

package stallprobe

import (
	"testing"
	"time"
)

func TestCyclictestMax(t *testing.T) {
	// rt-tests 2.x, --quiet: the summary line it prints on SIGINT.
	out := "# /dev/cpu_dma_latency set to 0us\nT: 0 (  812) P:99 I:10000 C:    204 Min:      4 Act:   13 Avg:   21 Max:   20931\n"
	d, err := CyclictestMax(out)
	if err != nil || d != 20931*time.Microsecond {
		t.Fatalf("CyclictestMax = %v, %v; want 20.931ms", d, err)
	}
	if _, err := CyclictestMax("T: 0 (  812) P:99 I:10000 C: 0"); err == nil {
		t.Error("no Max: accepted")
	}
}

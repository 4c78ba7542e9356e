// SPDX-License-Identifier: Apache-2.0

package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// cyclictestWorkload runs one SCHED_OTHER cyclictest thread with a 1 ms
// period beside the hogs: how many of its periods it gets to run (a late
// wakeup skips the periods it missed) and how late it wakes. This is a 5G
// slot or TTI timer on a busy node.
func cyclictestWorkload(*VariantRun) (map[string]float64, error) {
	secs := max(1, int(cycDur.Round(time.Second).Seconds()))
	hog, err := startHogs(time.Duration(secs+10) * time.Second)
	if err != nil {
		return nil, err
	}
	defer hog.stop()
	res := filepath.Join(os.TempDir(), fmt.Sprintf("cyclictest-%d.json", time.Now().UnixNano()))
	// The histogram (1 µs buckets up to 1 s) gives the p99; --default-system
	// leaves /dev/cpu_dma_latency alone, as for every other workload.
	_, err = run(time.Duration(secs)*time.Second+2*time.Minute, "cyclictest", "--quiet", "--threads=1",
		"--policy=other", "--interval=1000", "--duration="+strconv.Itoa(secs), "--histogram=1000000",
		"--default-system", "--json="+res)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(res)
	if err != nil {
		return nil, err
	}
	return parseCyclictest(b)
}

// parseCyclictest reads cyclictest's --json report (rt-tests 2.x) of its
// one thread.
func parseCyclictest(b []byte) (map[string]float64, error) {
	var doc struct {
		Thread map[string]struct {
			Histogram map[string]uint64 `json:"histogram"`
			Cycles    uint64            `json:"cycles"`
			Max       float64           `json:"max"`
			Avg       float64           `json:"avg"`
		} `json:"thread"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("cyclictest --json: %w", err)
	}
	t, ok := doc.Thread["0"]
	if !ok || t.Cycles == 0 {
		return nil, fmt.Errorf("cyclictest ran no period: %.300q", b)
	}
	return map[string]float64{
		"cyclictest_periods": float64(t.Cycles),
		"cyclictest_avg_us":  t.Avg,
		"cyclictest_p99_us":  histQuantile(t.Histogram, t.Cycles, 0.99, t.Max),
		"cyclictest_max_us":  t.Max,
	}, nil
}

// histQuantile is the q quantile of a histogram of 1 µs buckets (bucket
// index -> count) over total samples. Samples past the last bucket are not
// in it (overflows); if the quantile falls among them, the maximum is the
// only value known, and is returned.
func histQuantile(hist map[string]uint64, total uint64, q float64, maxUs float64) float64 {
	type bucket struct{ us, n uint64 }
	var bs []bucket
	for k, n := range hist {
		us, err := strconv.ParseUint(k, 10, 64)
		if err == nil {
			bs = append(bs, bucket{us, n})
		}
	}
	slices.SortFunc(bs, func(a, b bucket) int { return cmp.Compare(a.us, b.us) })
	need := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for _, b := range bs {
		if seen += b.n; seen >= need {
			return float64(b.us)
		}
	}
	return maxUs
}

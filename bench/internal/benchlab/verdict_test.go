// SPDX-License-Identifier: Apache-2.0

package benchlab

import (
	"strings"
	"testing"
)

func TestCompare(t *testing.T) {
	for _, c := range []struct {
		name       string
		base, cand []float64
		measurable bool
		ratio      float64
		say        []string // in the verdict
		notSay     []string
	}{
		{
			// The busy-host run: one round would have said 1.6x
			// slower; the other rounds put critical on both sides of EEVDF.
			name: "spread swamps the difference",
			base: []float64{3401, 5200, 2900, 6100, 4000}, cand: []float64{5506, 2600, 4100, 3000, 7000},
			say:    []string{"not measurable here", "the rounds overlap", "critical 2600–7000 µs", "eevdf 2900–6100 µs", "host busy"},
			notSay: []string{"faster", "slower"},
		},
		{
			name: "clear gain",
			base: []float64{3400, 3900, 3100, 4200, 3600}, cand: []float64{520, 610, 480, 700, 560},
			measurable: true, ratio: 3600.0 / 560,
			say: []string{"critical 6.4x faster than eevdf", "560 against 3600 µs", "per round 6.0–6.5x"},
		},
		{
			name: "clear loss",
			base: []float64{880, 900, 860, 910, 870}, cand: []float64{1190, 1250, 1150, 1300, 1200},
			measurable: true, ratio: 880.0 / 1200,
			say: []string{"critical 1.4x slower than eevdf", "per round 1.3–1.4x"},
		},
		{
			name: "too few rounds",
			base: []float64{3400, 0, 3500}, cand: []float64{500, 600, 0},
			say: []string{"not measurable here", "only 1 round(s) to compare critical and eevdf in, 3 needed"},
		},
		{
			name: "nothing measured",
			base: nil, cand: []float64{500},
			say: []string{"not measurable here", "only 0 round(s)", "host busy"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Compare(c.base, c.cand)
			if got.Measurable != c.measurable {
				t.Errorf("measurable %v, want %v (%+v)", got.Measurable, c.measurable, got)
			}
			if c.ratio != 0 && abs(got.Ratio-c.ratio) > 1e-9 {
				t.Errorf("ratio %v, want %v", got.Ratio, c.ratio)
			}
			v := got.Verdict("critical", "eevdf", "host busy 1.2 of 2 CPUs")
			for _, s := range c.say {
				if !strings.Contains(v, s) {
					t.Errorf("verdict %q lacks %q", v, s)
				}
			}
			for _, s := range c.notSay {
				if strings.Contains(v, s) {
					t.Errorf("verdict %q says %q", v, s)
				}
			}
		})
	}
}

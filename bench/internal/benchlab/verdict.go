// SPDX-License-Identifier: Apache-2.0

package benchlab

import (
	"fmt"
	"slices"
)

// MinRounds is the fewest rounds a comparison states a ratio from: with
// fewer, ranges that happen not to overlap say little.
const MinRounds = 3

// Comparison is a candidate's latency against a baseline's over rounds
// that each ran both (lower is better).
type Comparison struct {
	Rounds int `json:"rounds"`
	// Base and Cand are the medians and min-max ranges over those rounds.
	Base Range `json:"base"`
	Cand Range `json:"cand"`
	// Measurable: the two ranges do not overlap, so every round of one is
	// below every round of the other. With exchangeable rounds and no real
	// difference that happens with probability 2/C(2n,n): 10 % for 3
	// rounds, 0.8 % for 5.
	Measurable bool `json:"measurable"`
	// Ratio is the baseline's median over the candidate's (> 1: candidate
	// faster); RatioMin and RatioMax bound the per-round ratios.
	Ratio    float64 `json:"ratio"`
	RatioMin float64 `json:"ratio_min"`
	RatioMax float64 `json:"ratio_max"`
}

// Range is a median with the smallest and largest value it came from.
type Range struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// NewRange summarises xs (zero if empty).
func NewRange(xs []float64) Range {
	if len(xs) == 0 {
		return Range{}
	}
	return Range{Median: Median(xs), Min: slices.Min(xs), Max: slices.Max(xs)}
}

func (r Range) String() string {
	return fmt.Sprintf("%.0f [%.0f–%.0f]", r.Median, r.Min, r.Max)
}

// Compare pairs base[i] with cand[i] (round i); a round where either is
// missing (<= 0) is left out of both.
func Compare(base, cand []float64) Comparison {
	var b, c, ratios []float64
	for i := range min(len(base), len(cand)) {
		if base[i] > 0 && cand[i] > 0 {
			b, c = append(b, base[i]), append(c, cand[i])
			ratios = append(ratios, base[i]/cand[i])
		}
	}
	cmp := Comparison{Rounds: len(b), Base: NewRange(b), Cand: NewRange(c)}
	if len(b) == 0 {
		return cmp
	}
	cmp.Ratio = cmp.Base.Median / cmp.Cand.Median
	cmp.RatioMin, cmp.RatioMax = slices.Min(ratios), slices.Max(ratios)
	cmp.Measurable = len(b) >= MinRounds && (cmp.Cand.Max < cmp.Base.Min || cmp.Cand.Min > cmp.Base.Max)
	return cmp
}

// Verdict says the comparison in words: the ratio only when it is
// measurable, else "not measurable here" and why; noise (e.g. the host's
// load) is added to that reason.
func (c Comparison) Verdict(cand, base, noise string) string {
	switch {
	case c.Measurable && c.Ratio >= 1:
		return fmt.Sprintf("%s %sx faster than %s (%.0f against %.0f µs; per round %s–%sx, every round of %s below every round of %s)",
			cand, times(c.Ratio), base, c.Cand.Median, c.Base.Median, times(c.RatioMin), times(c.RatioMax), cand, base)
	case c.Measurable:
		return fmt.Sprintf("%s %sx slower than %s (%.0f against %.0f µs; per round %s–%sx, every round of %s above every round of %s)",
			cand, times(1/c.Ratio), base, c.Cand.Median, c.Base.Median, times(1/c.RatioMax), times(1/c.RatioMin), cand, base)
	}
	why := fmt.Sprintf("only %d round(s) to compare %s and %s in, %d needed", c.Rounds, cand, base, MinRounds)
	if c.Rounds >= MinRounds {
		why = fmt.Sprintf("the rounds overlap: %s %.0f–%.0f µs, %s %.0f–%.0f µs, a spread wider than the %.0f µs between the medians",
			cand, c.Cand.Min, c.Cand.Max, base, c.Base.Min, c.Base.Max, abs(c.Cand.Median-c.Base.Median))
	}
	if noise != "" {
		why += "; " + noise
	}
	return "not measurable here: " + why
}

func abs(x float64) float64 { return max(x, -x) }

// times prints a ratio with the precision TCG's noise leaves it.
func times(r float64) string {
	if r >= 10 {
		return fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%.1f", r)
}

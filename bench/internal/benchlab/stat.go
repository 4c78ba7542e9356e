// SPDX-License-Identifier: Apache-2.0

package benchlab

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
)

// Stat is one number of one variant over the boots that measured it.
type Stat struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Values []float64 `json:"values"` // in boot order
	Boots  []int     `json:"boots"`  // which boot measured each value
}

// NewStat summarises xs, measured by boots; nil (JSON null) if empty.
func NewStat(xs []float64, boots []int) *Stat {
	if len(xs) == 0 {
		return nil
	}
	s := &Stat{Median: Round(Median(xs)), Min: Round(slices.Min(xs)), Max: Round(slices.Max(xs)), Boots: boots}
	for _, x := range xs {
		s.Values = append(s.Values, Round(x))
	}
	return s
}

// Median of xs (the mean of the middle two for an even count); 0 if empty.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Round keeps what TCG's noise leaves meaningful: whole numbers above 100,
// three decimals below.
func Round(x float64) float64 {
	if math.Abs(x) >= 100 {
		return math.Round(x)
	}
	return math.Round(x*1000) / 1000
}

// ReadJSONFiles decodes each file (per-boot reports) into a T.
func ReadJSONFiles[T any](files []string) ([]T, error) {
	var out []T
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// ReadBoots reads the per-boot reports given to -merge, refusing none.
func ReadBoots[T any](files []string) ([]T, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("-merge: give the per-boot JSON files as arguments")
	}
	return ReadJSONFiles[T](files)
}

// MedianCI is a distribution-free confidence interval for the median of
// the population that xs were drawn from: the k-th smallest and k-th
// largest values, k the largest order such that the binomial tails (each
// value falls on either side of the median with probability 1/2) leave at
// least level outside the interval. It assumes nothing about the shape of
// the noise, which in a TCG guest is neither normal nor stable, only that
// the values are independent, which paired differences of alternating
// runs approximate (each pair cancels the drift common to both runs).
// ok is false when xs are too few for any interval at that level (fewer
// than 6 values at 0.95).
type CI struct {
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	Level float64 `json:"level"` // the interval's actual coverage, >= the level asked for
	N     int     `json:"n"`
}

func MedianCI(xs []float64, level float64) (CI, bool) {
	n := len(xs)
	s := slices.Sorted(slices.Values(xs))
	// tail(k) = P(X <= k-1) for X ~ Binomial(n, 1/2): the chance that the
	// k-th smallest value lies above the median.
	tail := func(k int) float64 {
		p, c := 0.0, 1.0 // c = C(n, i)
		for i := 0; i < k; i++ {
			p += c
			c = c * float64(n-i) / float64(i+1)
		}
		return p / math.Pow(2, float64(n))
	}
	k := 0
	for k+1 <= n/2 && 1-2*tail(k+1) >= level {
		k++
	}
	if k == 0 {
		return CI{N: n}, false
	}
	return CI{Lo: Round(s[k-1]), Hi: Round(s[n-k]), Level: Round(1 - 2*tail(k)), N: n}, true
}

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

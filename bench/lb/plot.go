// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// plotLatency draws each variant's open-loop latency histogram (all rounds
// pooled) on log-spaced bins, as the share of requests per bin, so tails
// of different variants can be compared by eye.
func plotLatency(out, path string, o options, byVariant map[string][]phase) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s new-connection latency, open loop at %d/s (%d rounds)", path, o.rate, o.repeats)
	p.X.Label.Text = "latency (µs, log scale)"
	p.Y.Label.Text = "share of requests per bin (log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	const perDecade = 10
	i := 0
	for _, v := range knownVariants {
		rounds, ok := byVariant[v]
		if !ok {
			continue
		}
		bins := map[int]float64{}
		var n float64
		for _, r := range rounds {
			for _, us := range r.LatencyUs {
				bins[int(math.Floor(math.Log10(math.Max(us, 1))*perDecade))]++
				n++
			}
		}
		if n == 0 {
			continue
		}
		var pts plotter.XYs
		for b := 0; b <= 7*perDecade; b++ { // 1 µs .. 10 s
			if c := bins[b]; c > 0 {
				pts = append(pts, plotter.XY{X: math.Pow(10, (float64(b)+0.5)/perDecade), Y: c / n})
			}
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		l.Width = vg.Points(1.5)
		l.Dashes = plotutil.Dashes(i % 3)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(v, l, s)
		i++
	}
	p.BackgroundColor = color.White
	return p.Save(9*vg.Inch, 5*vg.Inch, out)
}

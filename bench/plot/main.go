// SPDX-License-Identifier: Apache-2.0

// Command plot renders the RTT distributions of a benchmark report
// (bench/results/*.json with per-variant rtt_us samples) as CDFs on a log
// scale, one line per variant.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

type report struct {
	Kernel   string   `json:"kernel"`
	Order    []string `json:"order"`
	Variants map[string]struct {
		RTTUs []float64 `json:"rtt_us"`
		RTTMs []float64 `json:"rtt_ms"` // bench/gtp: pass -unit ms
		Error string    `json:"error"`
	} `json:"variants"`
}

func main() {
	in := flag.String("in", "bench/results/sched.json", "benchmark report")
	out := flag.String("out", "bench/results/sched.png", "PNG to write")
	unit := flag.String("unit", "µs", "unit of the samples, for the axis label (rtt_ms samples are used when a variant has no rtt_us)")
	title := flag.String("title", "Probe round-trip time", "plot title (the kernel is appended)")
	flag.Parse()
	if err := render(*in, *out, *unit, *title); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

func render(in, out, unit, title string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	p := plot.New()
	p.Title.Text = title + ", CDF (kernel " + r.Kernel + ")"
	p.X.Label.Text = "RTT (" + unit + ", log scale)"
	p.Y.Label.Text = "fraction of samples ≤ x"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	i := 0
	for _, name := range r.Order {
		v, ok := r.Variants[name]
		samples := v.RTTUs
		if len(samples) == 0 {
			samples = v.RTTMs
		}
		if !ok || v.Error != "" || len(samples) == 0 {
			continue
		}
		s := append([]float64(nil), samples...)
		sort.Float64s(s)
		pts := make(plotter.XYs, len(s))
		for j, x := range s {
			if x <= 0 {
				x = 1e-3
			}
			pts[j] = plotter.XY{X: x, Y: float64(j+1) / float64(len(s))}
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		l.Dashes = plotutil.Dashes(i % 3)
		p.Add(l)
		p.Legend.Add(name, l)
		i++
	}
	if i == 0 {
		return fmt.Errorf("%s has no samples to plot", in)
	}
	p.BackgroundColor = color.White
	return p.Save(9*vg.Inch, 5*vg.Inch, out)
}

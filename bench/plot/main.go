// SPDX-License-Identifier: Apache-2.0

// Command plot renders a benchmark report (bench/results/*.json) as a PNG.
// Reports with per-variant rtt_us (or rtt_ms) samples become CDFs on a log
// scale, one line per variant. A report that lists its metrics (the
// scheduler suite's sched.json) becomes a grid: the CDF of its samples, then
// one bar chart per metric, the bars at the median over boots with whiskers
// from the lowest to the highest boot.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"math"
	"os"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

type report struct {
	Kernel string   `json:"kernel"`
	Boots  int      `json:"boots"`
	Order  []string `json:"order"`
	// Metrics, when present, are the per-variant keys to chart.
	Metrics []struct {
		Key, Label, Better string
	} `json:"metrics"`
	Variants map[string]map[string]json.RawMessage `json:"variants"`
}

// stat is one metric of one variant over boots (bench/sched's Stat).
type stat struct {
	Median, Min, Max float64
}

func main() {
	in := flag.String("in", "bench/results/sched.json", "benchmark report")
	out := flag.String("out", "bench/results/sched.png", "PNG to write")
	unit := flag.String("unit", "µs", "unit of the samples, for the axis label (rtt_ms samples are used when a variant has no rtt_us)")
	title := flag.String("title", "Probe round-trip time", "CDF title (the kernel is appended); with metrics, the whole chart's")
	cdfTitle := flag.String("cdf-title", "Probe RTT beside hogs, all boots (CDF)", "with metrics: the CDF tile's title")
	flag.Parse()
	if err := render(*in, *out, *unit, *title, *cdfTitle); err != nil {
		fmt.Fprintln(os.Stderr, "plot:", err)
		os.Exit(1)
	}
}

func render(in, out, unit, title, cdfTitle string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if len(r.Metrics) > 0 {
		return renderSuite(r, out, unit, title, cdfTitle)
	}
	p, err := cdf(r, unit, title+", CDF (kernel "+r.Kernel+")")
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return p.Save(9*vg.Inch, 5*vg.Inch, out)
}

// samples are a variant's round trips, or nil if it has none (or failed).
func samples(v map[string]json.RawMessage) []float64 {
	var e string
	if json.Unmarshal(v["error"], &e) == nil && e != "" {
		return nil
	}
	var s []float64
	if json.Unmarshal(v["rtt_us"], &s) != nil || len(s) == 0 {
		json.Unmarshal(v["rtt_ms"], &s)
	}
	return s
}

// cdf plots every variant's samples as a CDF on a log scale.
func cdf(r report, unit, title string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "RTT (" + unit + ", log scale)"
	p.Y.Label.Text = "fraction of samples ≤ x"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = false
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	p.BackgroundColor = color.White
	n := 0
	for i, name := range r.Order {
		s := append([]float64(nil), samples(r.Variants[name])...)
		if len(s) == 0 {
			continue
		}
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
			return nil, err
		}
		// Colour by position in Order, so the suite's bars match.
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		l.Dashes = plotutil.Dashes(i % 3)
		p.Add(l)
		p.Legend.Add(name, l)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("no samples to plot")
	}
	return p, nil
}

// renderSuite draws the CDF and one bar chart per metric in a grid.
func renderSuite(r report, out, unit, title, cdfTitle string) error {
	var plots []*plot.Plot
	if p, err := cdf(r, unit, cdfTitle); err == nil {
		plots = append(plots, p)
	}
	for _, m := range r.Metrics {
		p, err := bars(r, m.Key, m.Label, m.Better)
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	const cols = 4
	rows := (len(plots) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, p := range plots {
		grid[i/cols][i%cols] = p
	}
	w, h := 18*vg.Inch, vg.Length(rows)*3.6*vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	top := vg.Length(0.45) * vg.Inch
	title = fmt.Sprintf("%s: kernel %s, medians of %d boots, whiskers min-max", title, r.Kernel, r.Boots)
	dc.FillText(draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 14), Handler: plot.DefaultTextHandler, XAlign: draw.XCenter},
		vg.Point{X: w / 2, Y: h - top/2 - 5}, title)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Inch / 5, PadY: vg.Inch / 5, PadTop: top, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8, PadBottom: vg.Inch / 8}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j, p := range grid[i] {
			if p != nil {
				p.Draw(canvases[i][j])
			}
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// bars charts one metric: a bar per variant at its median, whiskers from
// the lowest to the highest boot; variants without it have no bar.
func bars(r report, key, label, better string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = label
	if better != "" {
		p.Title.Text += " — " + better + " is better"
	}
	p.Title.TextStyle.Font.Size = vg.Points(10)
	p.BackgroundColor = color.White
	p.Add(plotter.NewGrid())
	p.NominalX(r.Order...)
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter
	p.Y.Min = 0
	p.Y.Tick.Marker = plainTicks{}
	for i, name := range r.Order {
		raw, ok := r.Variants[name][key]
		var s *stat
		if !ok || json.Unmarshal(raw, &s) != nil || s == nil {
			continue
		}
		b, err := plotter.NewBarChart(plotter.Values{s.Median}, vg.Points(16))
		if err != nil {
			return nil, err
		}
		b.XMin = float64(i)
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		p.Add(b)
		eb, err := plotter.NewYErrorBars(spread{x: float64(i), s: *s})
		if err != nil {
			return nil, err
		}
		p.Add(eb)
	}
	return p, nil
}

// plainTicks are the default ticks labelled without trailing zeros.
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}

// spread is one whisker for plotter.NewYErrorBars.
type spread struct {
	x float64
	s stat
}

func (e spread) Len() int                      { return 1 }
func (e spread) XY(int) (float64, float64)     { return e.x, e.s.Median }
func (e spread) YError(int) (float64, float64) { return e.s.Median - e.s.Min, e.s.Max - e.s.Median }

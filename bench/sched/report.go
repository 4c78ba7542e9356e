// SPDX-License-Identifier: Apache-2.0

package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// printBoot prints one boot: the probe table (as bench-sched always
// printed it), every metric by variant, and what failed.
func printBoot(w io.Writer, rep BootReport) {
	if slices.Contains(strings.Split(rep.Settings.Workloads, ","), "probe") {
		printProbes(w, rep)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "metric\t")
	for _, name := range rep.Order {
		fmt.Fprintf(tw, "%s\t", name)
	}
	fmt.Fprintln(tw)
	for _, m := range metrics {
		fmt.Fprintf(tw, "%s\t", m.Key)
		for _, name := range rep.Order {
			if x, ok := rep.Variants[name].Metrics[m.Key]; ok {
				fmt.Fprintf(tw, "%s\t", num(x))
			} else {
				fmt.Fprintf(tw, "-\t")
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	for _, name := range rep.Order {
		v := rep.Variants[name]
		if v.Error != "" {
			fmt.Fprintf(w, "%s: %s\n", name, v.Error)
		}
		for _, wl := range errorKeys() {
			if e := v.Errors[wl]; e != "" {
				fmt.Fprintf(w, "%s: %s: %s\n", name, wl, e)
			}
		}
		if c := v.Layered; c != nil && c.ProbeInCritical {
			fmt.Fprintf(w, "%s: %s\n", name, c.Verdict)
		}
	}
}

// printProbes prints the probe's phases per variant.
func printProbes(w io.Writer, rep BootReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "variant\tprobe\tsamples\tavg µs\tp50 µs\tp90 µs\tp99 µs\tmax µs\thog ops/CPU-s\tavg vs eevdf loaded\t\n")
	var base float64
	if e := rep.Variants["eevdf"]; e != nil && e.ProbeLoaded != nil {
		base = e.ProbeLoaded.AvgUs
	}
	for _, name := range rep.Order {
		v := rep.Variants[name]
		if v.ProbeIdle == nil && v.ProbeLoaded == nil {
			why := v.Error
			if why == "" {
				why = v.Errors["probe"]
			}
			fmt.Fprintf(tw, "%s\t-\t\t\t\t\t\t\t\t%.60s\t\n", name, why)
			continue
		}
		for _, p := range []struct {
			phase string
			r     *ProbeResult
		}{{"idle", v.ProbeIdle}, {"loaded", v.ProbeLoaded}} {
			if p.r == nil {
				continue
			}
			ratio, hog := "-", "-"
			if base > 0 && p.r.AvgUs > 0 {
				ratio = fmt.Sprintf("%.1fx better", base/p.r.AvgUs)
			}
			if p.r.HogOpsPerCPUS > 0 {
				hog = fmt.Sprintf("%.0f", p.r.HogOpsPerCPUS)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%s\t%s\t\n", name, p.phase, p.r.Samples,
				p.r.AvgUs, p.r.P50Us, p.r.P90Us, p.r.P99Us, p.r.MaxUs, hog, ratio)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
}

// printReport prints the merged medians, their spread (half the min-max
// range, in % of the median) and the goals.
func printReport(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "kernel %s, %d CPUs, %d boots, profile %s; median ±half the min-max range\n", rep.Kernel, rep.CPUs, rep.Boots, cmp.Or(rep.Settings.Profile, profiles[0].name))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "metric\t")
	for _, name := range rep.Order {
		fmt.Fprintf(tw, "%s\t", name)
	}
	fmt.Fprintln(tw)
	for _, m := range metrics {
		fmt.Fprintf(tw, "%s\t", m.Key)
		for _, name := range rep.Order {
			s, _ := rep.Variants[name][m.Key].(*Stat)
			switch {
			case s == nil:
				fmt.Fprintf(tw, "-\t")
			case s.Median == 0:
				fmt.Fprintf(tw, "%s\t", num(s.Median))
			default:
				fmt.Fprintf(tw, "%s ±%.0f%%\t", num(s.Median), 50*(s.Max-s.Min)/math.Abs(s.Median))
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	for _, name := range rep.Order {
		if errs, ok := rep.Variants[name]["errors"].([]string); ok {
			for _, e := range errs {
				fmt.Fprintf(w, "%s: %s\n", name, e)
			}
		}
	}
	for _, name := range rep.Order {
		if in, ok := rep.Variants[name]["probe_in_critical_layer"].(bool); ok {
			fmt.Fprintf(w, "%s: probe in its critical layer in every boot: %v\n", name, in)
		}
	}
	fmt.Fprintf(w, "\ntorture: %d of %d runs survived %s\n", rep.Torture.Survived, rep.Torture.Runs, rep.Torture.Note)
	fmt.Fprintf(w, "goals (issue #18%s):\n", map[bool]string{true: ", #39's for the heavy profile"}[rep.Settings.Profile == "heavy"])
	for _, g := range rep.Goals {
		mark := "  ?"
		if g.Met != nil {
			mark = map[bool]string{true: " ok", false: "NOT"}[*g.Met]
		}
		fmt.Fprintf(w, "  %s  %s: %s\n", mark, g.Goal, g.Value)
	}
}

func num(x float64) string {
	if math.Abs(x) >= 100 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.3g", x)
}

// SPDX-License-Identifier: Apache-2.0

package cmd

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/spf13/cobra"
)

func newStatsCmd() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show the running scheduler's counters and run-queue wait per class",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client := &http.Client{Timeout: 5 * time.Second}
			resp, err := client.Get("http://" + addr + "/metrics")
			if err != nil {
				return fmt.Errorf("no scheduler metrics at %s (is `swiftlane run` running with --metrics-addr %s?): %w", addr, addr, err)
			}
			defer resp.Body.Close()
			return printStats(os.Stdout, resp.Body)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:9461", "metrics address of `swiftlane run`")
	return cmd
}

func printStats(w io.Writer, r io.Reader) error {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return fmt.Errorf("parse metrics: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	names := make([]string, 0, len(fams))
	for n := range fams {
		if strings.HasPrefix(n, "swiftlane_") && n != "swiftlane_runqueue_wait_seconds" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		for _, m := range fams[n].Metric {
			fmt.Fprintf(tw, "%s%s\t%.0f\n", strings.TrimPrefix(n, "swiftlane_"), labels(m), value(m))
		}
	}
	tw.Flush()
	if f, ok := fams["swiftlane_runqueue_wait_seconds"]; ok {
		fmt.Fprintln(w, "\nrun-queue wait (runnable → running):")
		fmt.Fprintf(tw, "class\tsamples\tavg µs\tp50 µs ≤\tp99 µs ≤\n")
		for _, m := range f.Metric {
			h := m.GetHistogram()
			n := h.GetSampleCount()
			avg := 0.0
			if n > 0 {
				avg = h.GetSampleSum() / float64(n) * 1e6
			}
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%s\n", labelValue(m, "class"), n, avg, histQuantile(h, 0.5), histQuantile(h, 0.99))
		}
		tw.Flush()
	}
	return nil
}

func labels(m *dto.Metric) string {
	if len(m.Label) == 0 {
		return ""
	}
	parts := make([]string, 0, len(m.Label))
	for _, l := range m.Label {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// histQuantile is the upper bound of the bucket holding quantile q.
func histQuantile(h *dto.Histogram, q float64) string {
	n := h.GetSampleCount()
	if n == 0 {
		return "-"
	}
	want := uint64(q * float64(n))
	for _, b := range h.Bucket {
		if b.GetCumulativeCount() >= want && b.GetCumulativeCount() > 0 {
			return fmt.Sprintf("%.0f", b.GetUpperBound()*1e6)
		}
	}
	return "inf"
}

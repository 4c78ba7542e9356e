// SPDX-License-Identifier: Apache-2.0

package benchlab

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape reads swiftlane's metrics from addr (host:port) as
// name.label... -> value, without the swiftlane_ prefix: counters and gauges
// as they are, a histogram as .count, .avg_us and its cumulative buckets
// .le.<upper bound in seconds>. Empty when the scheduler does not answer.
func Scrape(addr string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return out
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "swiftlane_") {
			continue
		}
		for _, m := range f.Metric {
			key := strings.TrimPrefix(name, "swiftlane_")
			for _, l := range m.Label {
				key += "." + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil && m.Histogram.GetSampleCount() > 0:
				h := m.Histogram
				out[key+".count"] = float64(h.GetSampleCount())
				out[key+".avg_us"] = h.GetSampleSum() / float64(h.GetSampleCount()) * 1e6
				for _, b := range h.Bucket {
					out[key+".le."+strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)] = float64(b.GetCumulativeCount())
				}
			}
		}
	}
	return out
}

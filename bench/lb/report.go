// SPDX-License-Identifier: Apache-2.0

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
)

// summary is one variant on one path over all rounds. cps and p99_us keep
// the names earlier results used; every number is the mean over rounds with
// its 95 % interval (Student's t; null with one round).
type summary struct {
	CPS              float64          `json:"cps"`
	CPSci            *[2]float64      `json:"cps_ci95"`
	P50us            float64          `json:"p50_us"`
	P50ci            *[2]float64      `json:"p50_us_ci95"`
	P99us            float64          `json:"p99_us"`
	P99ci            *[2]float64      `json:"p99_us_ci95"`
	P99Median        float64          `json:"p99_us_median"` // a tail is heavy-tailed over rounds too: the median and
	P99Range         [2]float64       `json:"p99_us_range"`  // the range say more than a mean when one round stalls
	P999us           float64          `json:"p99_9_us"`
	P999ci           *[2]float64      `json:"p99_9_us_ci95"`
	MaxUs            float64          `json:"max_us"`
	MaxCi            *[2]float64      `json:"max_us_ci95"`
	Gbps             float64          `json:"throughput_gbps"`
	GbpsCi           *[2]float64      `json:"throughput_gbps_ci95"`
	CPUusPerConn     float64          `json:"cpu_us_per_conn"`
	CPUci            *[2]float64      `json:"cpu_us_per_conn_ci95"`
	DpCPUusPerConn   float64          `json:"dp_cpu_us_per_conn"`
	DpCPUci          *[2]float64      `json:"dp_cpu_us_per_conn_ci95"`
	InstrPerReq      *float64         `json:"instr_per_req"` // null: no PMU here
	ConntrackEntries int              `json:"conntrack_entries"`
	Errors           int64            `json:"errors"`
	Nstat            map[string]int64 `json:"nstat"` // summed over rounds
	Rounds           []phase          `json:"rounds"`
}

type report struct {
	Generated  string                        `json:"generated"`
	Kernel     string                        `json:"kernel"`
	Scenario   string                        `json:"scenario"`
	Services   int                           `json:"services"` // Services in each NAT setup (-services): the measured one + dummies
	Method     []string                      `json:"method"`
	Settings   map[string]any                `json:"settings"`
	Order      [][]string                    `json:"order"`    // variant order of each round
	Variants   map[string]summary            `json:"variants"` // ClusterIP path
	NodePort   map[string]summary            `json:"nodeport"` // NodePort path
	Ratios     map[string]map[string]float64 `json:"ratios"`   // swiftlane's mean over each other variant's
	Findings   []string                      `json:"findings"` // differences whose intervals do not overlap
	Paired     []string                      `json:"paired"`   // tails compared round by round
	Baseline   []vsBaseline                  `json:"swiftlane_vs_baseline,omitempty"`
	Skipped    map[string]string             `json:"skipped"`
	Histograms []string                      `json:"histograms"`
	PerfStatus string                        `json:"perf_status"`
}

func newReport(o options) *report {
	kernel, _ := exec.Command("uname", "-r").Output()
	ipt, _ := exec.Command("iptables", "-V").Output()
	r := &report{
		Generated: time.Now().UTC().Format(time.RFC3339),
		Kernel:    strings.TrimSpace(string(kernel)),
		Scenario:  "client pod -> ClusterIP 10.96.0.10 (external host -> NodePort 30080) -> 3 backend pods; network namespaces on one machine; one topology, only the NAT setup changes between variants",
		Method: []string{
			"cps: wrk (Debian), 1 thread, -c connections, Connection: close (a new TCP connection per request), closed loop, pinned to client_cpu",
			"latency: bench/lb/loadgen, open loop at rate_rps new connections/s, each measured from its scheduled start (no coordinated omission), pinned to client_cpu",
			"throughput: one TCP stream from loadgen for half a phase",
			"cpu_us_per_conn: /proc/stat busy time of all CPUs during the cps phase / requests (includes wrk and the backends); dp_cpu_us_per_conn: the data-path CPU only (RPS steers the node's receive processing there; backends run there too)",
			"nstat: deltas over the three phases, summed over client, node and backend namespaces; wrk resets the connections it has open when a phase ends, so TcpEstabResets/TcpOutRsts of up to `connections` per phase are expected",
			"swiftlane: `swiftlane lb` runs as its own process in the node namespace on dp_cpu with its defaults (session sweep every 5 s), except peerRedirectExclude: [vc, ext0]: replies enter the client namespaces through their backlog, so the clients' receive work goes to client_cpu by RPS as for every other variant instead of running on dp_cpu; backends keep peer redirect",
			"none: the client connects straight to one backend, no translation (the limit)",
			"each round runs every variant once; rounds come in mirrored pairs of orders (round 2m+2 runs round 2m+1's order reversed, each pair rotated by one), so a drift through the run does not read as a difference between two variants; intervals are 95 % Student's t over rounds",
		},
		Settings: map[string]any{
			"duration_s": o.duration.Seconds(), "rate_rps": o.rate, "connections": o.connections, "repeats": o.repeats,
			"client_cpu": o.clientCPU, "dp_cpu": o.dpCPU, "iptables": strings.TrimSpace(string(ipt)),
			"sessions_max": o.sessionsMax,
		},
		Services: o.services,
		Variants: map[string]summary{}, NodePort: map[string]summary{},
		Ratios:     map[string]map[string]float64{},
		Skipped:    map[string]string{},
		PerfStatus: "no hardware PMU on this machine: instructions per request are not counted (null)",
	}
	if o.baseline != "" {
		r.Settings["baseline"] = o.baseline
		r.Settings["baseline_sha256"] = fileSHA256(o.baseline)
		r.Settings["swiftlane_sha256"] = fileSHA256(o.swiftlane)
		r.Method = append(r.Method, baselineVariant+": swiftlane exactly as above from the binary settings.baseline (a previous build), in the same rounds; swiftlane_vs_baseline sets the two side by side per path and metric, with the per-round ratio's geometric mean and its 95 % interval (Student's t on the logarithms)")
	}
	if o.services > 1 {
		r.Method = append(r.Method, fmt.Sprintf("services: %d dummy Services beside the measured one in every variant (one TCP port each, %d endpoints that nothing routes to, a NodePort while 30000-32767 has one free); iptables: kube-proxy's chains, the measured Service after half of them in KUBE-SERVICES and NodePorts in KUBE-NODEPORTS behind its last rule; nftables: more service-ips map elements; IPVS: more virtual servers; swiftlane: more services",
			o.services-1, dummyEndpointCount))
	}
	return r
}

// fileSHA256 names the exact binary a variant ran ("" if unreadable: the
// run itself then fails on it).
func fileSHA256(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

// tCrit is Student's t for a two-sided 95 % interval with df degrees of freedom.
func tCrit(df int) float64 {
	table := []float64{0, 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228}
	switch {
	case df < 1:
		return math.NaN()
	case df < len(table):
		return table[df]
	case df <= 20:
		return 2.086
	case df <= 30:
		return 2.042
	}
	return 1.96
}

// meanHalfWidth is the mean of xs and the half width of its 95 % interval
// (NaN with fewer than two values).
func meanHalfWidth(xs []float64) (m, h float64) {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	m = sum / float64(len(xs))
	if len(xs) < 2 {
		return m, math.NaN()
	}
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return m, tCrit(len(xs)-1) * math.Sqrt(ss/float64(len(xs)-1)) / math.Sqrt(float64(len(xs)))
}

// meanCI is the mean and, with two or more values, its 95 % interval.
func meanCI(xs []float64) (float64, *[2]float64) {
	if len(xs) == 0 {
		return 0, nil
	}
	m, h := meanHalfWidth(xs)
	if math.IsNaN(h) {
		return m, nil
	}
	return m, &[2]float64{max(0, m-h), m + h} // every metric here is non-negative
}

func sortedCopy(xs []float64) []float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s
}

// quantile of sorted samples (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(len(sorted)-1, i))]
}

// column is one number of every round, in round order.
func column(rounds []phase, f func(phase) float64) []float64 {
	out := make([]float64, len(rounds))
	for i, r := range rounds {
		out[i] = f(r)
	}
	return out
}

func summarise(rounds []phase) summary {
	col := func(f func(phase) float64) []float64 { return column(rounds, f) }
	var s summary
	s.CPS, s.CPSci = meanCI(col(func(p phase) float64 { return p.CPS }))
	s.P50us, s.P50ci = meanCI(col(func(p phase) float64 { return p.P50us }))
	s.P99us, s.P99ci = meanCI(col(func(p phase) float64 { return p.P99us }))
	if p99 := col(func(p phase) float64 { return p.P99us }); len(p99) > 0 {
		s.P99Median, s.P99Range = benchlab.Median(p99), [2]float64{slices.Min(p99), slices.Max(p99)}
	}
	s.P999us, s.P999ci = meanCI(col(func(p phase) float64 { return p.P999us }))
	s.MaxUs, s.MaxCi = meanCI(col(func(p phase) float64 { return p.MaxUs }))
	s.Gbps, s.GbpsCi = meanCI(col(func(p phase) float64 { return p.Gbps }))
	s.CPUusPerConn, s.CPUci = meanCI(col(func(p phase) float64 { return p.CPUusPerConn }))
	s.DpCPUusPerConn, s.DpCPUci = meanCI(col(func(p phase) float64 { return p.DpCPUusPerConn }))
	ct, _ := meanCI(col(func(p phase) float64 { return float64(p.ConntrackEntries) }))
	s.ConntrackEntries = int(math.Round(ct))
	s.Nstat = map[string]int64{}
	for _, r := range rounds {
		s.Errors += r.WrkErrors + r.LatencyErrors
		for k, v := range r.Nstat {
			s.Nstat[k] += v
		}
	}
	s.Rounds = rounds
	return s
}

// metric names a summary column for ratios and findings; round is the
// same number in one round.
type metric struct {
	name       string
	higherGood bool
	get        func(summary) (float64, *[2]float64)
	round      func(phase) float64
}

var metrics = []metric{
	{"cps", true, func(s summary) (float64, *[2]float64) { return s.CPS, s.CPSci }, func(p phase) float64 { return p.CPS }},
	{"p50_us", false, func(s summary) (float64, *[2]float64) { return s.P50us, s.P50ci }, func(p phase) float64 { return p.P50us }},
	{"p99_us", false, func(s summary) (float64, *[2]float64) { return s.P99us, s.P99ci }, func(p phase) float64 { return p.P99us }},
	{"p99_9_us", false, func(s summary) (float64, *[2]float64) { return s.P999us, s.P999ci }, func(p phase) float64 { return p.P999us }},
	{"throughput_gbps", true, func(s summary) (float64, *[2]float64) { return s.Gbps, s.GbpsCi }, func(p phase) float64 { return p.Gbps }},
	{"cpu_us_per_conn", false, func(s summary) (float64, *[2]float64) { return s.CPUusPerConn, s.CPUci }, func(p phase) float64 { return p.CPUusPerConn }},
	{"dp_cpu_us_per_conn", false, func(s summary) (float64, *[2]float64) { return s.DpCPUusPerConn, s.DpCPUci }, func(p phase) float64 { return p.DpCPUusPerConn }},
}

// apart is whether two 95 % intervals exist and do not overlap: the
// report's test for a difference beyond the spread of the means.
func apart(a, b *[2]float64) bool {
	return a != nil && b != nil && (a[1] < b[0] || b[1] < a[0])
}

// pairedRatio is the geometric mean of a[i]/b[i] over the rounds both
// measured, with its 95 % interval (Student's t on the logarithms: host
// noise multiplies a number rather than adding to it). The interval is nil
// with fewer than two rounds or a round without a positive value on both
// sides.
func pairedRatio(a, b []float64) (float64, *[2]float64) {
	n := min(len(a), len(b))
	var logs []float64
	for i := range n {
		if a[i] <= 0 || b[i] <= 0 {
			return 0, nil
		}
		logs = append(logs, math.Log(a[i]/b[i]))
	}
	if n < 2 {
		return 0, nil
	}
	m, h := meanHalfWidth(logs)
	return math.Exp(m), &[2]float64{math.Exp(m - h), math.Exp(m + h)}
}

// vsBaseline is one metric on one path, swiftlane against baselineVariant
// (a previous binary) measured in the same rounds.
type vsBaseline struct {
	Path        string      `json:"path"`
	Metric      string      `json:"metric"`
	Baseline    float64     `json:"baseline"`
	BaselineCI  *[2]float64 `json:"baseline_ci95"`
	Swiftlane   float64     `json:"swiftlane"`
	SwiftlaneCI *[2]float64 `json:"swiftlane_ci95"`
	Ratio       float64     `json:"ratio"`             // swiftlane's mean over the baseline's
	Paired      float64     `json:"paired_ratio"`      // geometric mean of the per-round ratios
	PairedCI    *[2]float64 `json:"paired_ratio_ci95"` // null with fewer than two rounds
	Verdict     string      `json:"verdict"`
}

// compareBaseline sets swiftlane beside the baseline binary for every
// metric. A difference is beyond the spread when the means' intervals are
// apart or the per-round ratio's interval excludes 1 (the sharper test:
// both ran in every round, minutes apart, so one noisy round moves both);
// at 95 % each, a run without a change still crosses about one row in 20.
func compareBaseline(path string, sl, bl summary) []vsBaseline {
	var rows []vsBaseline
	for _, m := range metrics {
		a, aci := m.get(sl)
		b, bci := m.get(bl)
		row := vsBaseline{Path: path, Metric: m.name, Baseline: b, BaselineCI: bci, Swiftlane: a, SwiftlaneCI: aci}
		if b != 0 {
			row.Ratio = a / b
		}
		row.Paired, row.PairedCI = pairedRatio(column(sl.Rounds, m.round), column(bl.Rounds, m.round))
		var why []string
		if apart(aci, bci) {
			why = append(why, "means' 95 % intervals apart")
		}
		if c := row.PairedCI; c != nil && (c[0] > 1 || c[1] < 1) {
			why = append(why, "per-round ratio's 95 % interval excludes 1")
		}
		switch {
		case aci == nil || bci == nil:
			row.Verdict = "no spread: one round"
		case len(why) == 0:
			row.Verdict = "within the spread"
		default:
			word := map[bool]string{true: "better", false: "worse"}[(a > b) == m.higherGood]
			row.Verdict = fmt.Sprintf("beyond the spread, %s (%s)", word, strings.Join(why, "; "))
		}
		rows = append(rows, row)
	}
	return rows
}

// reanalyse recomputes the report in file from its stored rounds (after a
// change to the statistics, the measurements stay as they were) and writes
// it to out.
func reanalyse(file, out string) error {
	reports, err := benchlab.ReadJSONFiles[report]([]string{file})
	if err != nil {
		return err
	}
	r := reports[0]
	raw := map[string]map[string][]phase{"clusterip": {}, "nodeport": {}}
	for v, s := range r.Variants {
		raw["clusterip"][v] = s.Rounds
	}
	for v, s := range r.NodePort {
		raw["nodeport"][v] = s.Rounds
	}
	r.Variants, r.NodePort = map[string]summary{}, map[string]summary{}
	r.Ratios, r.Findings, r.Paired, r.Baseline = map[string]map[string]float64{}, nil, nil, nil
	r.summarise(raw)
	return r.write(out)
}

// write stores the report as JSON and prints its table.
func (r *report) write(out string) error {
	if err := benchlab.WriteJSON(out, r); err != nil {
		return err
	}
	r.printTable(os.Stdout)
	return nil
}

// byPath is one path's summaries by variant.
func (r *report) byPath(path string) map[string]summary {
	if path == "nodeport" {
		return r.NodePort
	}
	return r.Variants
}

func (r *report) summarise(raw map[string]map[string][]phase) {
	for path, byVariant := range raw {
		dst := r.byPath(path)
		for v, rounds := range byVariant {
			dst[v] = summarise(rounds)
		}
		sl, ok := dst["swiftlane"]
		if !ok {
			continue
		}
		for _, v := range slices.Sorted(maps.Keys(dst)) {
			if v == "swiftlane" {
				continue
			}
			o := dst[v]
			ratios := map[string]float64{}
			for _, m := range metrics {
				a, aci := m.get(sl)
				b, bci := m.get(o)
				if b != 0 {
					ratios[m.name] = a / b
				}
				// Only differences whose intervals do not overlap are findings.
				if !apart(aci, bci) {
					continue
				}
				better := (a > b) == m.higherGood
				word := map[bool]string{true: "better", false: "worse"}[better]
				r.Findings = append(r.Findings, fmt.Sprintf("%s %s: swiftlane %.4g vs %s %.4g (%+.0f %%, %s; 95 %% intervals %.4g-%.4g and %.4g-%.4g do not overlap)",
					path, m.name, a, v, b, 100*(a/b-1), word, aci[0], aci[1], bci[0], bci[1]))
			}
			r.Ratios[path+"_swiftlane_over_"+v] = ratios
			if p := paired(path, sl, v, o); p != "" {
				r.Paired = append(r.Paired, p)
			}
		}
	}
	slices.Sort(r.Findings)
	slices.Sort(r.Paired)
	for _, path := range []string{"clusterip", "nodeport"} {
		sl, ok := r.byPath(path)["swiftlane"]
		bl, okb := r.byPath(path)[baselineVariant]
		if ok && okb {
			r.Baseline = append(r.Baseline, compareBaseline(path, sl, bl)...)
		}
	}
}

// paired compares swiftlane's p99 with variant v's round by round. Each
// round runs every variant within a few minutes, so a burst of host noise
// lands on a round, and one such round widens a mean's interval until a
// tail difference present in every other round cannot show. How many
// rounds each side wins, with the medians, is what the tail comparison
// rests on; with every round won over n rounds, a one-sided sign test
// gives 2^-n (0.03 for 5). The per-round ratio's geometric mean and its
// 95 % interval (Student's t on the logs: host noise multiplies a tail
// rather than adding to it) say how large the difference is; an interval
// that excludes 1 is a difference beyond the rounds' spread.
func paired(path string, sl summary, v string, o summary) string {
	n := min(len(sl.Rounds), len(o.Rounds))
	if n < 3 {
		return ""
	}
	p99 := func(p phase) float64 { return p.P99us }
	a, b := column(sl.Rounds[:n], p99), column(o.Rounds[:n], p99)
	lower := 0
	for i := range n {
		if a[i] < b[i] {
			lower++
		}
	}
	diff := ""
	if o.P99Median > 0 {
		diff = fmt.Sprintf(", %+.0f %%", 100*(sl.P99Median/o.P99Median-1))
	}
	ratio := ""
	if m, c := pairedRatio(a, b); c != nil {
		ratio = fmt.Sprintf("; ratio %.2g (95 %% interval %.2g-%.2g)", m, c[0], c[1])
	}
	return fmt.Sprintf("%s p99_us: swiftlane below %s in %d of %d rounds; medians %.4g vs %.4g%s (ranges %.4g-%.4g and %.4g-%.4g)%s",
		path, v, lower, n, sl.P99Median, o.P99Median, diff, sl.P99Range[0], sl.P99Range[1], o.P99Range[0], o.P99Range[1], ratio)
}

func ci(c *[2]float64) string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf(" (%.0f–%.0f)", c[0], c[1])
}

// printTable writes a Markdown table (means, intervals in parentheses) and
// the findings.
func (r *report) printTable(w io.Writer) {
	fmt.Fprintf(w, "Services in each NAT setup: %d\n\n", r.Services)
	fmt.Fprintln(w, "| path | variant | conn/s | p50 µs | p99 µs | p99.9 µs | Gbit/s | CPU µs/conn | conntrack | errors |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range []struct {
		name string
		m    map[string]summary
	}{{"ClusterIP", r.Variants}, {"NodePort", r.NodePort}} {
		for _, v := range knownVariants {
			s, ok := p.m[v]
			if !ok {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %.0f%s | %.0f%s | %.0f%s | %.0f%s | %.2f | %.1f | %d | %d |\n", p.name, v,
				s.CPS, ci(s.CPSci), s.P50us, ci(s.P50ci), s.P99us, ci(s.P99ci), s.P999us, ci(s.P999ci),
				s.Gbps, s.CPUusPerConn, s.ConntrackEntries, s.Errors)
		}
	}
	for v, why := range r.Skipped {
		fmt.Fprintf(w, "\n%s skipped: %s\n", v, why)
	}
	if len(r.Findings) == 0 {
		why := ""
		if rounds, _ := r.Settings["repeats"].(int); rounds < 2 {
			why = " (one round gives no interval)"
		}
		fmt.Fprintf(w, "\nNo difference between swiftlane and another variant has non-overlapping 95 %% intervals%s.\n", why)
	} else {
		fmt.Fprintln(w, "\nDifferences whose 95 % intervals do not overlap:")
		for _, f := range r.Findings {
			fmt.Fprintln(w, "- "+f)
		}
	}
	r.printPaired(w)
	r.printBaseline(w)
}

// printBaseline sets swiftlane and the baseline binary side by side.
func (r *report) printBaseline(w io.Writer) {
	if len(r.Baseline) == 0 {
		return
	}
	fmt.Fprintf(w, "\nswiftlane against %s (%v), means with 95 %% intervals; ratios swiftlane / baseline:\n\n", baselineVariant, r.Settings["baseline"])
	fmt.Fprintln(w, "| path | metric | "+baselineVariant+" | swiftlane | ratio of means | per-round ratio (95 %) | verdict |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---|")
	short := func(x float64) string { // whole µs and conn/s; three digits below 100
		if math.Abs(x) >= 100 {
			return fmt.Sprintf("%.0f", x)
		}
		return fmt.Sprintf("%.3g", x)
	}
	num := func(x float64, c *[2]float64) string {
		if c == nil {
			return short(x)
		}
		return fmt.Sprintf("%s (%s–%s)", short(x), short(c[0]), short(c[1]))
	}
	for _, b := range r.Baseline {
		paired := "–"
		if b.PairedCI != nil {
			paired = fmt.Sprintf("%.3f (%.3f–%.3f)", b.Paired, b.PairedCI[0], b.PairedCI[1])
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.3f | %s | %s |\n", b.Path, b.Metric,
			num(b.Baseline, b.BaselineCI), num(b.Swiftlane, b.SwiftlaneCI), b.Ratio, paired, b.Verdict)
	}
}

func (r *report) printPaired(w io.Writer) {
	if len(r.Paired) == 0 {
		return
	}
	fmt.Fprintln(w, "\np99 round by round (each round runs every variant within minutes):")
	for _, p := range r.Paired {
		fmt.Fprintln(w, "- "+p)
	}
}

// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/operator"
	"github.com/swiftlane/swiftlane/internal/strategy"
	"github.com/swiftlane/swiftlane/internal/trace"
)

type nopSink struct{}

func (nopSink) SetDynamic(uint32, applier.Entry, string) error { return nil }
func (nopSink) ClearDynamic(uint32, string) error              { return nil }

// The restart timing is read from the operator's own log line, as
// `swiftlane run` prints it (slog text): keep the two in step.
func TestCarrierLineFromOperator(t *testing.T) {
	var buf bytes.Buffer
	op := operator.New(nopSink{}, operator.Options{
		Class:     strategy.Critical,
		Monotonic: func() uint64 { return 5_012_345_678 },
		Alive:     func(uint32) bool { return true },
		Now:       func() time.Time { return time.Unix(1000, 0) },
		Log:       slog.New(slog.NewTextHandler(&buf, nil)),
	})
	op.Handle(trace.Event{KtimeNs: 5_000_000_000, TGID: 4242, PID: 4242, Comm: "swiftlane", Function: "gtp_encap_recv", Context: trace.Process})
	m := carrierRE(4242).FindStringSubmatch(buf.String())
	if m == nil || m[1] != "12.346" {
		t.Fatalf("carrier line not parsed (%q): %s", m, buf.String())
	}
	if carrierRE(424).MatchString(buf.String()) {
		t.Fatal("matched another pid")
	}
}

func TestPingOutputAndStats(t *testing.T) {
	out := "seq 1 rtt 2.500 ms\nseq 2 rtt 10.125 ms\nError: no echo reply from 10.100.0.1 (seq 3)\n"
	var got []string
	for _, m := range rttRE.FindAllStringSubmatch(out, -1) {
		got = append(got, m[1])
	}
	if len(got) != 2 || got[0] != "2.500" || got[1] != "10.125" {
		t.Fatalf("parsed %q", got)
	}
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p := percentile(s, 50); p != 5 {
		t.Errorf("p50 = %v", p)
	}
	if p := percentile(s, 99); p != 10 {
		t.Errorf("p99 = %v", p)
	}
	if got := improvement(&Result{AvgMs: 100, Samples: 1}, &Result{AvgMs: 2.34}); got != "+97.66 %" {
		t.Errorf("improvement = %q", got)
	}
}

// Three boots, made-up numbers: the merge takes per-boot improvements,
// medians and ranges, puts eevdf-idle's idle numbers under every load and
// judges the goals on the medians.
func TestMergeBoots(t *testing.T) {
	res := func(avg, p99, max float64) *Result {
		return &Result{MinMs: avg / 2, AvgMs: avg, P50Ms: avg, P90Ms: p99, P99Ms: p99, MaxMs: max, Samples: 10, RTTMs: []float64{avg}}
	}
	var boots []Report
	for b := 1; b <= 3; b++ {
		f := float64(b) // boot 2 is the median of every number
		r := Report{Boot: b, Loads: loads, Variants: map[string]*Variant{}, Order: all,
			Restart: &Restart{Ms: []float64{10 * f, 20 * f, 30 * f, 40 * f}}}
		r.Variants["eevdf-idle"] = &Variant{Loads: map[string]*Result{"idle": res(1*f, 2*f, 3*f)}}
		for _, name := range all[1:] {
			v := &Variant{Loads: map[string]*Result{}}
			for _, l := range loads {
				switch name {
				case "eevdf-loaded":
					v.Loads[l.Key] = res(100*f, 200*f, 300*f)
				case "swiftlane-auto-loaded":
					v.Loads[l.Key] = res(1.1*f, 2*f, 6*f)
				default:
					v.Loads[l.Key] = res(3*f, 5*f, 9*f)
				}
			}
			r.Variants[name] = v
		}
		r.Variants["swiftlane-auto-loaded"].Loads["idle"] = res(1*f, 1.5*f, 3*f)
		boots = append(boots, r)
	}
	boots[0].Variants["scx_bpfland-loaded"].Loads["both"].Error = "both: the scheduler exited"
	boots[0].Variants["eevdf-loaded"].Loads["both"].Error = "both: only 800 of 1000 samples within 2m0s (0 timeouts)" // as older boots wrote it
	boots[1].Variants["eevdf-loaded"].Loads["both"].Note = "only 900 of 1000 samples within 2m0s (0 timeouts)"
	m := mergeReports(boots)

	got := m.Variants["swiftlane-auto-loaded"]["hogs_avg_vs_eevdf_loaded_pct"].(*Stat)
	if got.Median != 98.9 || len(got.Values) != 3 {
		t.Errorf("improvement %+v, want median 98.9 over 3 boots", got)
	}
	if s := m.Variants["eevdf-idle"]["messaging_avg_ms"].(*Stat); s.Median != 2 || s.Min != 1 || s.Max != 3 {
		t.Errorf("eevdf-idle under messaging: %+v, want its idle avg 2 (1-3)", s)
	}
	if s := m.Variants["scx_bpfland-loaded"]["both_avg_ms"].(*Stat); len(s.Values) != 2 {
		t.Errorf("a failed boot's numbers were merged: %+v", s)
	}
	if e, _ := m.Variants["scx_bpfland-loaded"]["notes"].([]string); len(e) != 1 || e[0] != "boot 1: both: the scheduler exited" {
		t.Errorf("notes %q", e)
	}
	if s := m.Variants["eevdf-loaded"]["both_avg_ms"].(*Stat); len(s.Values) != 3 {
		t.Errorf("short runs (fewer samples than asked) were left out: %+v", s)
	}
	if e, _ := m.Variants["eevdf-loaded"]["notes"].([]string); len(e) != 2 {
		t.Errorf("shortfalls not noted: %q", e)
	}
	if m.Variants["eevdf-loaded"]["avg_ms"] != 200.0 || len(m.Variants["eevdf-loaded"]["rtt_ms"].([]float64)) != 3 {
		t.Errorf("first load's top-level keys: avg_ms %v rtt_ms %v", m.Variants["eevdf-loaded"]["avg_ms"], m.Variants["eevdf-loaded"]["rtt_ms"])
	}
	if s := m.Variants["swiftlane-auto-loaded"]["idle_avg_ms"].(*Stat); s.Median != 2 || len(s.Values) != 3 {
		t.Errorf("automatic mode's idle phase: %+v, want avg 2 over 3 boots", s)
	}
	if _, ok := m.Variants["swiftlane-loaded"]["idle_avg_ms"]; ok {
		t.Errorf("an idle stat for a variant measured only loaded")
	}
	if m.Variants["swiftlane-auto-loaded"]["avg_ms"] != 2.2 {
		t.Errorf("automatic's top-level avg_ms %v, want its first load's (2.2), not its idle phase's", m.Variants["swiftlane-auto-loaded"]["avg_ms"])
	}
	if r := m.Restart; r.Restarts != 12 || r.Max != 120 {
		t.Errorf("restarts %+v, want 12 with max 120", r)
	}
	met := map[string]bool{}
	for _, g := range m.Goals {
		met[g.Goal] = g.Met
	}
	for goal, want := range map[string]bool{
		"hogs: automatic avg improvement vs EEVDF loaded (%)":                                 true,  // 98.9
		"hogs: automatic avg / EEVDF idle avg":                                                true,  // 1.1
		"hogs: automatic max / EEVDF idle max":                                                true,  // 12 / 6
		"messaging: swiftlane without strategies / automatic, avg":                            true,  // 6/2.2
		"both: scx_rustland-loaded / automatic, p99":                                          true,  // 10/4
		"messaging: swiftlane without strategies / automatic idle, avg (the ratio's ceiling)": true,  // 6/2, reported
		"gNB restart re-prioritised, max over 12 restarts (ms)":                               false, // 120
	} {
		if got, ok := met[goal]; !ok || got != want {
			t.Errorf("goal %q: met %v (present %v), want %v; goals %+v", goal, got, ok, want, m.Goals)
		}
	}
}

// The reference's 97.7 % applies only where EEVDF degrades about as much as
// it did there (~45x idle); at 8x the goal is marked not applicable, not
// failed.
func TestHogsGoalNeedsTheReferenceDegradation(t *testing.T) {
	res := func(avg float64) *Result {
		return &Result{MinMs: avg, AvgMs: avg, P50Ms: avg, P90Ms: avg, P99Ms: avg, MaxMs: avg, Samples: 10, RTTMs: []float64{avg}}
	}
	hogs := []Load{loads[0]}
	for _, c := range []struct {
		eevdf      float64
		applicable bool
	}{{8, false}, {45, true}} {
		r := Report{Boot: 1, Loads: hogs, Order: all, Variants: map[string]*Variant{
			"eevdf-idle":            {Loads: map[string]*Result{"idle": res(1)}},
			"eevdf-loaded":          {Loads: map[string]*Result{"hogs": res(c.eevdf)}},
			"swiftlane-auto-loaded": {Loads: map[string]*Result{"hogs": res(0.9)}},
		}}
		m := mergeReports([]Report{r})
		i := slices.IndexFunc(m.Goals, func(g Goal) bool { return strings.HasPrefix(g.Goal, "hogs: automatic avg improvement") })
		if i < 0 {
			t.Fatalf("EEVDF %vx: no improvement goal in %+v", c.eevdf, m.Goals)
		}
		g := m.Goals[i]
		if g.NotApplicable == c.applicable || (c.applicable && !g.Met) || (!c.applicable && g.Met) {
			t.Errorf("EEVDF %vx: goal %+v, want applicable %v", c.eevdf, g, c.applicable)
		}
	}
}

// Automatic mode measures idle first: its top-level result is still its
// first load's, and its idle phase only when nothing else was measured.
func TestFirstLoaded(t *testing.T) {
	use := append([]Load{idleLoad}, loads...)
	idle, hogs := &Result{AvgMs: 1}, &Result{AvgMs: 2}
	if r := firstLoaded(&Variant{Loads: map[string]*Result{"idle": idle, "hogs": hogs}}, use); r != hogs {
		t.Errorf("got %+v, want the hogs phase", r)
	}
	if r := firstLoaded(&Variant{Loads: map[string]*Result{"idle": idle}}, use); r != idle {
		t.Errorf("got %+v, want the idle phase when the loads never ran", r)
	}
	if r := firstLoaded(&Variant{Loads: map[string]*Result{}}, use); r == nil {
		t.Error("nil result")
	}
}

func TestCarriersIn(t *testing.T) {
	log := `time=1 level=INFO msg="GTP-U carrier prioritised" pid=12 comm=swiftlane class=critical function=gtp_encap_recv first_packet_to_map_ms=1.2
time=2 level=INFO msg="GTP-U carrier idle: entry removed" pid=12 comm=swiftlane idle=1.5s
time=3 level=INFO msg="GTP-U carrier prioritised" pid=40 comm=sched-messagin class=critical function=gtp_dev_xmit first_packet_to_map_ms=3
time=4 level=INFO msg="GTP-U carrier prioritised" pid=12 comm=swiftlane class=critical function=gtp_encap_recv first_packet_to_map_ms=0.8
`
	got := carriersIn(log)
	if want := []string{"swiftlane 12", "sched-messagin 40"}; !slices.Equal(got, want) {
		t.Fatalf("carriersIn = %q, want %q", got, want)
	}
}

// A lost reply counts as the timeout: a variant that loses replies cannot
// look faster than one that answers them all; old boots are recomputed.
func TestLostRepliesCount(t *testing.T) {
	r := &Result{RTTMs: []float64{10, 10, 10}, Timeouts: 1}
	r.summarize(3000)
	if r.AvgMs != 757.5 || r.MaxMs != 3000 || r.TimeoutMs != 3000 {
		t.Errorf("with one lost reply: %+v", r)
	}
	old := Report{Variants: map[string]*Variant{"v": {Loads: map[string]*Result{
		"hogs":  {RTTMs: []float64{10, 10, 10}, Timeouts: 1, AvgMs: 10},
		"clean": {RTTMs: []float64{10}, AvgMs: 10},
	}}}}
	countLostReplies([]Report{old})
	if r := old.Variants["v"].Loads["hogs"]; r.AvgMs != 757.5 || r.TimeoutMs != legacyTimeoutMs {
		t.Errorf("old boot with a lost reply not recomputed: %+v", r)
	}
	if r := old.Variants["v"].Loads["clean"]; r.AvgMs != 10 || r.TimeoutMs != 0 {
		t.Errorf("old boot without lost replies changed: %+v", r)
	}
}

// phaseWaits over two scrapes of swiftlane's exposition (the names and
// bucket bounds noderuntime serves), read through benchlab.Scrape.
func TestPhaseWaits(t *testing.T) {
	expo := func(count, under, overdue int) string {
		return fmt.Sprintf(`# TYPE swiftlane_runqueue_wait_seconds histogram
swiftlane_runqueue_wait_seconds_bucket{class="normal",le="0.262144"} %[2]d
swiftlane_runqueue_wait_seconds_bucket{class="normal",le="0.524288"} %[2]d
swiftlane_runqueue_wait_seconds_bucket{class="normal",le="+Inf"} %[1]d
swiftlane_runqueue_wait_seconds_sum{class="normal"} 1
swiftlane_runqueue_wait_seconds_count{class="normal"} %[1]d
# TYPE swiftlane_runqueue_wait_max_seconds gauge
swiftlane_runqueue_wait_max_seconds 2.5
# TYPE swiftlane_dispatch_total counter
swiftlane_dispatch_total{path="overdue"} %[3]d
`, count, under, overdue)
	}
	body := expo(10, 9, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	before := benchlab.Scrape(addr)
	body = expo(110, 105, 40)
	w := phaseWaits(before, benchlab.Scrape(addr))
	if w == nil || w.Count != 100 || w.Over500ms != 4 || w.MaxMs != 2500 || w.Overdue != 36 {
		t.Fatalf("phaseWaits = %+v, want count 100, over 0.5 s 4, max 2500 ms, overdue 36", w)
	}
	if phaseWaits(before, map[string]float64{}) != nil {
		t.Error("no scrape after the phase (the scheduler gone) should give no record")
	}
}

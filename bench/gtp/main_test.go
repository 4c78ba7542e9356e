// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/swiftlane/swiftlane/internal/operator"
	"github.com/swiftlane/swiftlane/internal/strategy"
	"github.com/swiftlane/swiftlane/internal/trace"
)

type nopSink struct{}

func (nopSink) SetDynamic(uint32, strategy.Entry, string) error { return nil }
func (nopSink) ClearDynamic(uint32, string) error               { return nil }

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
	if got := improvement(&Variant{AvgMs: 100, Samples: 1}, &Variant{AvgMs: 2.34}); got != "+97.66 %" {
		t.Errorf("improvement = %q", got)
	}
}

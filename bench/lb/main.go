// SPDX-License-Identifier: Apache-2.0

// Command lb benchmarks service load balancing in one run on one machine:
// the kube-proxy iptables shape (DNAT + MASQUERADE, conntrack), the
// kube-proxy nftables shape, and swiftlane's BPF datapath, each in a fresh
// copy of the same namespace topology (client pod -> service -> 3 backend
// pods, plus an external client for NodePort). It writes JSON and prints a
// table. Run as root: `make bench-lb`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/swiftlane/swiftlane/internal/lb/balancer"
	"github.com/swiftlane/swiftlane/internal/lb/labnet"
	"github.com/swiftlane/swiftlane/internal/lb/services"
)

// Result is one variant's numbers for one path.
type Result struct {
	CPS              float64  `json:"cps"`
	P50us            float64  `json:"p50_us"`
	P99us            float64  `json:"p99_us"`
	ThroughputGbps   float64  `json:"throughput_gbps"`
	InstrPerReq      *float64 `json:"instr_per_req"` // null where perf cannot count instructions
	ConntrackEntries int      `json:"conntrack_entries"`
	Errors           int64    `json:"errors"`
}

type report struct {
	Generated  string             `json:"generated"`
	Kernel     string             `json:"kernel"`
	Scenario   string             `json:"scenario"`
	Settings   map[string]any     `json:"settings"`
	Variants   map[string]Result  `json:"variants"` // ClusterIP path
	NodePort   map[string]Result  `json:"nodeport"` // NodePort path, same columns
	Ratios     map[string]float64 `json:"ratios"`   // swiftlane vs iptables, ClusterIP
	Notes      []string           `json:"notes"`
	PerfStatus string             `json:"perf_status"`
}

type options struct {
	out      string
	duration time.Duration
	rate     int
	workers  int
	only     string
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "bench/results/lb.json", "JSON output path")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "length of each measurement phase")
	flag.IntVar(&o.rate, "rate", 1000, "fixed request rate (new connections/s) for the latency phase")
	flag.IntVar(&o.workers, "workers", 4, "closed-loop client threads for the connection-rate phase")
	flag.StringVar(&o.only, "only", "", "run one variant (iptables, nftables, swiftlane)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-lb:", err)
		os.Exit(1)
	}
}

var variants = []string{"iptables", "nftables", "swiftlane"}

func run(o options) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root to create network namespaces and load BPF; run `sudo make bench-lb`")
	}
	rep := report{
		Generated: time.Now().UTC().Format(time.RFC3339),
		Kernel:    strings.TrimSpace(must(exec.Command("uname", "-r").Output())),
		Scenario:  "client pod -> ClusterIP 10.96.0.10 (and external host -> NodePort) -> 3 backend pods, all in network namespaces on one machine",
		Settings: map[string]any{
			"duration_s": o.duration.Seconds(), "rate_rps": o.rate, "workers": o.workers,
			"iptables": strings.TrimSpace(must(exec.Command("iptables", "-V").Output())),
		},
		Variants: map[string]Result{}, NodePort: map[string]Result{},
		Notes: []string{
			"Client, load balancer and servers share the machine's CPUs, so absolute numbers include the Go client and servers; compare variants within one run.",
			"ipvs is not in this machine's kernel and was not measured.",
			"conntrack_entries is counted in the node namespace right after the connection-rate phase; the swiftlane node also has an nft rule that keeps conntrack active, as a real node would.",
		},
	}
	perfOK, perfWhy := perfWorks()
	rep.PerfStatus = perfWhy
	for _, v := range variants {
		if o.only != "" && o.only != v {
			continue
		}
		fmt.Fprintf(os.Stderr, "== %s\n", v)
		cip, np, err := measureVariant(v, o, perfOK)
		if err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
		rep.Variants[v], rep.NodePort[v] = cip, np
	}
	if ipt, ok := rep.Variants["iptables"]; ok {
		if sl, ok := rep.Variants["swiftlane"]; ok && ipt.CPS > 0 && ipt.P99us > 0 {
			rep.Ratios = map[string]float64{
				"cps_swiftlane_over_iptables": sl.CPS / ipt.CPS,
				"p99_swiftlane_over_iptables": sl.P99us / ipt.P99us,
			}
			if nft, ok := rep.Variants["nftables"]; ok && nft.CPS > 0 {
				rep.Ratios["cps_swiftlane_over_nftables"] = sl.CPS / nft.CPS
				rep.Ratios["p99_swiftlane_over_nftables"] = sl.P99us / nft.P99us
			}
		}
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.out, append(data, '\n'), 0o644); err != nil {
		return err
	}
	printTable(rep)
	fmt.Printf("wrote %s\n", o.out)
	return nil
}

func must(b []byte, _ error) string { return string(b) }

func measureVariant(v string, o options, perfOK bool) (cip, np Result, err error) {
	topo, err := labnet.New(3)
	if err != nil {
		return cip, np, err
	}
	defer topo.Close()
	for i, b := range topo.Backends {
		short, err := b.Listen(":8080")
		if err != nil {
			return cip, np, err
		}
		defer short.Close()
		go serveShort(short)
		sink, err := b.Listen(":8081")
		if err != nil {
			return cip, np, err
		}
		defer sink.Close()
		go serveSink(sink)
		_ = i
	}
	switch v {
	case "iptables":
		err = applyIptables(topo)
	case "nftables":
		err = applyNft(topo)
	case "swiftlane":
		if err = topo.TrackConnections(); err != nil {
			break
		}
		var lb *balancer.Balancer
		lb, err = startSwiftlane(topo)
		if lb != nil {
			defer lb.Close()
		}
	}
	if err != nil {
		return cip, np, err
	}
	cip, err = measurePath(topo, topo.Client, clusterIP.String(), 80, 5001, o, perfOK)
	if err != nil {
		return cip, np, fmt.Errorf("ClusterIP: %w", err)
	}
	np, err = measurePath(topo, topo.External, topo.NodeIP.String(), 30080, 30501, o, perfOK)
	if err != nil {
		return cip, np, fmt.Errorf("NodePort: %w", err)
	}
	return cip, np, nil
}

func startSwiftlane(topo *labnet.Topology) (*balancer.Balancer, error) {
	cfg, err := services.Parse([]byte(swiftlaneConfig(topo)))
	if err != nil {
		return nil, err
	}
	lb, err := balancer.New(cfg, nil)
	if err != nil {
		return nil, err
	}
	if err := topo.Node.Do(func() error { _, err := lb.AttachInterfaces(); return err }); err != nil {
		lb.Close()
		return nil, err
	}
	return lb, nil
}

func measurePath(topo *labnet.Topology, from labnet.NS, addr string, port, streamPort int, o options, perfOK bool) (Result, error) {
	var r Result
	target := fmt.Sprintf("%s:%d", addr, port)
	// Warm up neighbour caches and JITs; also proves the path works.
	if err := from.Do(func() error { return request(target) }); err != nil {
		return r, fmt.Errorf("first request to %s: %w", target, err)
	}
	if _, err := topo.Node.Run("conntrack", "-F"); err != nil {
		return r, err
	}

	var perfOut chan float64
	if perfOK {
		perfOut = make(chan float64, 1)
		go func() { perfOut <- perfInstructions(o.duration) }()
	}
	done, failed := closedLoop(from, target, o.workers, o.duration)
	r.CPS = float64(done) / o.duration.Seconds()
	r.Errors = failed
	if perfOut != nil {
		if instr := <-perfOut; instr > 0 && done > 0 {
			v := instr / float64(done)
			r.InstrPerReq = &v
		}
	}
	n, err := topo.Node.ConntrackCount()
	if err != nil {
		return r, err
	}
	r.ConntrackEntries = n

	lat, lfail := openLoop(from, target, o.rate, o.duration, 32)
	r.P50us = float64(percentile(lat, 0.50).Microseconds())
	r.P99us = float64(percentile(lat, 0.99).Microseconds())
	r.Errors += int64(lfail)

	bytes, err := stream(from, fmt.Sprintf("%s:%d", addr, streamPort), o.duration)
	if err != nil {
		return r, fmt.Errorf("stream: %w", err)
	}
	r.ThroughputGbps = float64(bytes) * 8 / o.duration.Seconds() / 1e9
	fmt.Fprintf(os.Stderr, "   %-22s cps %8.0f  p50 %6.0fus  p99 %6.0fus  %6.2f Gbit/s  conntrack %d  errors %d\n",
		target, r.CPS, r.P50us, r.P99us, r.ThroughputGbps, r.ConntrackEntries, r.Errors)
	return r, nil
}

// perfWorks reports whether hardware instruction counting is available
// (it is not in most VMs).
func perfWorks() (bool, string) {
	out, err := exec.Command("perf", "stat", "-x,", "-e", "instructions", "--", "true").CombinedOutput()
	if err != nil {
		return false, "perf unavailable: " + err.Error()
	}
	if strings.Contains(string(out), "<not supported>") || strings.Contains(string(out), "<not counted>") {
		return false, "perf cannot count instructions here (no hardware PMU); instr_per_req is null"
	}
	return true, "perf stat -a -e instructions during the connection-rate phase (system-wide: includes client and servers)"
}

func perfInstructions(d time.Duration) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "perf", "stat", "-x,", "-a", "-e", "instructions", "--",
		"sleep", strconv.FormatFloat(d.Seconds(), 'f', 3, 64)).CombinedOutput()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Split(line, ",")
		if len(f) > 2 && f[2] == "instructions" {
			v, _ := strconv.ParseFloat(f[0], 64)
			return v
		}
	}
	return 0
}

func printTable(rep report) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "path\tvariant\tconn/s\tp50 µs\tp99 µs\tGbit/s\tinstr/req\tconntrack\terrors\t")
	for _, path := range []struct {
		name string
		m    map[string]Result
	}{{"ClusterIP", rep.Variants}, {"NodePort", rep.NodePort}} {
		for _, v := range variants {
			r, ok := path.m[v]
			if !ok {
				continue
			}
			instr := "n/a"
			if r.InstrPerReq != nil {
				instr = fmt.Sprintf("%.0f", *r.InstrPerReq)
			}
			fmt.Fprintf(w, "%s\t%s\t%.0f\t%.0f\t%.0f\t%.2f\t%s\t%d\t%d\t\n",
				path.name, v, r.CPS, r.P50us, r.P99us, r.ThroughputGbps, instr, r.ConntrackEntries, r.Errors)
		}
	}
	w.Flush()
	if len(rep.Ratios) > 0 {
		fmt.Printf("swiftlane vs iptables (ClusterIP): conn/s x%.2f, p99 x%.2f\n",
			rep.Ratios["cps_swiftlane_over_iptables"], rep.Ratios["p99_swiftlane_over_iptables"])
	}
}

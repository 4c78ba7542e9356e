// SPDX-License-Identifier: Apache-2.0

// Command lb benchmarks Service load balancing on one machine: no load
// balancer (client straight to a backend: the limit), the kube-proxy
// iptables, nftables and IPVS shapes, and swiftlane's BPF datapath, on one
// namespace topology (client pod -> service -> 3 backend pods, plus an
// external client for NodePort) where only the NAT setup changes between
// variants. Load comes from C tools pinned to their own CPU (wrk for the
// closed-loop connection rate, bench/lb/loadgen for open-loop latency and
// the bulk stream); the data path, the backends and this program share the
// other CPU. Every variant runs -repeats times, rounds in mirrored pairs
// (benchlab.MirroredOrder: over two rounds each two variants run both
// ways), and each number is reported with its 95 % interval over the
// repeats. Run as root: `make bench-lb`.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/swiftlane/swiftlane/bench/internal/benchlab"
	"github.com/swiftlane/swiftlane/internal/lb/labnet"
)

var allVariants = []string{"none", "iptables", "nftables", "ipvs", "swiftlane"}

// optionalVariants run only when -variants names them. swiftlane-nosweep is
// swiftlane with its session sweep held off (--sweep-interval 1h), measured
// in the same rounds as swiftlane to tell the sweep's share of a tail.
// swiftlane-baseline is swiftlane run the same way from another binary
// (-baseline, a previous build), so a change to the LB is measured against
// what it replaces in the same rounds, on the same host load.
var optionalVariants = []string{"swiftlane-nosweep", baselineVariant}

const baselineVariant = "swiftlane-baseline"

// knownVariants is every name -variants accepts, in report order.
var knownVariants = append(slices.Clone(allVariants), optionalVariants...)

type options struct {
	out, pngDir       string
	duration          time.Duration
	rate, connections int
	repeats           int
	services          int
	variants          []string
	loadgen, wrk      string
	swiftlane         string
	baseline          string // a previous swiftlane binary, for baselineVariant
	clientCPU, dpCPU  int
	timesDir          string
	reanalyse         string
	sessionsMax       int
}

// defaultSessionsMax sizes swiftlane's session map as docs/lb.md tells a
// node to: new connections/s × (closingIdle 10 s + sweep 5 s) × 2 entries.
// The closed-loop phase makes ~31,000 connections/s here, 930,000 entries;
// a smaller map stays full into the latency phase that follows, where every
// insert then evicts (which did not measurably move swiftlane's tail:
// bench/results/lb-sessions-1m.json, but a node would not run that way).
const defaultSessionsMax = 1 << 20

func main() {
	var o options
	var variants string
	flag.StringVar(&o.out, "out", "bench/results/lb.json", "JSON output path")
	flag.StringVar(&o.pngDir, "png-dir", "bench/results", "directory for the latency histograms (lb-latency-<path>.png)")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "length of each measurement phase (the issue asks for 20-30 s)")
	flag.IntVar(&o.rate, "rate", 1000, "open-loop latency phase: new connections per second")
	flag.IntVar(&o.connections, "connections", 32, "wrk connections in the connection-rate phase")
	flag.StringVar(&o.timesDir, "times-dir", "", "also keep each latency phase's samples with their start times, one file per phase (loadgen's LOADGEN_TIMES), to place a stall in time")
	flag.IntVar(&o.repeats, "repeats", 6, "rounds; each runs every variant once, rounds in mirrored pairs of orders (an even number runs each two variants as often one way as the other)")
	flag.IntVar(&o.services, "services", 1, fmt.Sprintf("Services in every variant's NAT setup, 1 to %d: the measured one and n-1 dummies (kube-proxy's iptables mode walks one rule per Service port for each new connection)", maxServices))
	flag.StringVar(&variants, "variants", strings.Join(allVariants, ","), "comma-separated subset of "+strings.Join(knownVariants, ","))
	flag.StringVar(&o.loadgen, "loadgen", "", "path of the built bench/lb/loadgen (make bench-lb builds it)")
	flag.StringVar(&o.wrk, "wrk", "wrk", "wrk binary (Debian package wrk)")
	flag.StringVar(&o.swiftlane, "swiftlane", "", "the built swiftlane binary, run as `swiftlane lb` for the swiftlane variant (make bench-lb builds it)")
	flag.StringVar(&o.baseline, "baseline", "", "a previous swiftlane binary, run exactly like -swiftlane as the variant "+baselineVariant+" (added to -variants if they do not name it); the report compares the two side by side")
	flag.IntVar(&o.clientCPU, "client-cpu", 0, "CPU for the load generators")
	flag.IntVar(&o.dpCPU, "dp-cpu", 1, "CPU for the data path (RPS), the backends and this program")
	flag.IntVar(&o.sessionsMax, "sessions-max", defaultSessionsMax, "swiftlane's sessions.max (docs/lb.md, \"Sizing\")")
	flag.StringVar(&o.reanalyse, "reanalyse", "", "measure nothing: recompute a stored report's summaries, findings and round-by-round comparisons from its rounds, write them to -out and print the table")
	flag.Parse()
	if o.reanalyse != "" {
		if err := reanalyse(o.reanalyse, o.out); err != nil {
			fmt.Fprintln(os.Stderr, "bench-lb: -reanalyse:", err)
			os.Exit(1)
		}
		return
	}
	var err error
	if o.variants, err = parseVariants(variants, o.baseline); err != nil {
		fmt.Fprintln(os.Stderr, "bench-lb:", err)
		os.Exit(2)
	}
	if err := checkBinaries(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-lb:", err)
		os.Exit(2)
	}
	if o.services < 1 || o.services > maxServices {
		fmt.Fprintf(os.Stderr, "bench-lb: -services %d: use 1 to %d\n", o.services, maxServices)
		os.Exit(2)
	}
	if o.timesDir != "" {
		if err := os.MkdirAll(o.timesDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "bench-lb: -times-dir:", err)
			os.Exit(2)
		}
	}
	if err := pinSelf(o.dpCPU); err != nil {
		fmt.Fprintln(os.Stderr, "bench-lb:", err)
		os.Exit(1)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-lb:", err)
		os.Exit(1)
	}
}

// parseVariants checks -variants against knownVariants and pairs it with
// -baseline: a baseline binary adds its variant, and that variant needs one.
func parseVariants(list, baseline string) ([]string, error) {
	var vs []string
	for _, v := range strings.Split(list, ",") {
		if !slices.Contains(knownVariants, v) {
			return nil, fmt.Errorf("-variants: %q is not one of %s", v, strings.Join(knownVariants, ","))
		}
		if slices.Contains(vs, v) {
			return nil, fmt.Errorf("-variants: %q is listed twice; name each variant once", v)
		}
		vs = append(vs, v)
	}
	switch has := slices.Contains(vs, baselineVariant); {
	case baseline != "" && !has:
		vs = append(vs, baselineVariant)
	case baseline == "" && has:
		return nil, fmt.Errorf("-variants: %s needs -baseline PATH, the previous swiftlane binary to run", baselineVariant)
	}
	return vs, nil
}

// checkBinaries fails before any measuring when a swiftlane variant's
// binary cannot run: otherwise the mistake shows in whichever round first
// reaches that variant, minutes in.
func checkBinaries(o options) error {
	for _, c := range []struct{ flag, path, variant string }{
		{"-swiftlane", o.swiftlane, "swiftlane"},
		{"-swiftlane", o.swiftlane, "swiftlane-nosweep"},
		{"-baseline", o.baseline, baselineVariant},
	} {
		if !slices.Contains(o.variants, c.variant) {
			continue
		}
		if c.path == "" {
			return fmt.Errorf("%s: required for the %s variant (make bench-lb builds build/swiftlane)", c.flag, c.variant)
		}
		if _, err := exec.LookPath(c.path); err != nil {
			return fmt.Errorf("%s %s: %w (the %s variant runs it as `swiftlane lb`)", c.flag, c.path, err, c.variant)
		}
	}
	return nil
}

// pinSelf re-executes the program under taskset on cpu, so every thread
// (backends, swiftlane's control side) stays off the load generators' CPU.
func pinSelf(cpu int) error {
	const env = "SWL_BENCH_LB_PINNED"
	if os.Getenv(env) == "1" {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		return fmt.Errorf("taskset (util-linux) pins the benchmark: %w", err)
	}
	args := append([]string{"taskset", "-c", strconv.Itoa(cpu), self}, os.Args[1:]...)
	return syscall.Exec(taskset, args, append(os.Environ(), env+"=1"))
}

func run(o options) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root to create network namespaces and load BPF; run `sudo make bench-lb`")
	}
	if o.loadgen == "" {
		return errors.New("-loadgen: required (make bench-lb builds bench/lb/loadgen/loadgen.c)")
	}
	if _, err := exec.LookPath(o.wrk); err != nil {
		return fmt.Errorf("-wrk: %w (apt-get install wrk; mk/lb-deps.sh does)", err)
	}
	b, err := newBench(o)
	if err != nil {
		return err
	}
	defer b.close()

	rep := newReport(o)
	if err := ipvsAvailable(b.topo); err != nil && slices.Contains(o.variants, "ipvs") {
		rep.Skipped["ipvs"] = err.Error()
		o.variants = slices.DeleteFunc(slices.Clone(o.variants), func(v string) bool { return v == "ipvs" })
		fmt.Fprintln(os.Stderr, "skipping ipvs:", err)
	}
	raw := map[string]map[string][]phase{"clusterip": {}, "nodeport": {}}
	for round := range o.repeats {
		order := benchlab.MirroredOrder(o.variants, round+1)
		rep.Order = append(rep.Order, order)
		for _, v := range order {
			fmt.Fprintf(os.Stderr, "== round %d/%d: %s\n", round+1, o.repeats, v)
			cip, np, err := b.measureVariant(v)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, v, err)
			}
			raw["clusterip"][v] = append(raw["clusterip"][v], cip)
			raw["nodeport"][v] = append(raw["nodeport"][v], np)
		}
	}
	rep.summarise(raw)
	for path, m := range raw {
		png := filepath.Join(o.pngDir, "lb-latency-"+path+".png")
		if err := plotLatency(png, path, o, m); err != nil {
			return fmt.Errorf("plot %s: %w", png, err)
		}
		rep.Histograms = append(rep.Histograms, png)
	}
	slices.Sort(rep.Histograms)
	return rep.write(o.out)
}

// bench is the one topology every variant runs on.
type bench struct {
	o    options
	topo *labnet.Topology
	tmp  string // swiftlane's services file
	stop []func()

	variant  string // being measured, for -times-dir's file names
	timesSeq int
}

func newBench(o options) (*bench, error) {
	topo, err := labnet.New(3)
	if err != nil {
		return nil, err
	}
	b := &bench{o: o, topo: topo}
	if b.tmp, err = os.MkdirTemp("", "bench-lb-"); err != nil {
		topo.Close()
		return nil, err
	}
	b.stop = append(b.stop, func() { os.RemoveAll(b.tmp) })
	if err := b.prepare(); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

func (b *bench) close() {
	for _, f := range slices.Backward(b.stop) {
		f()
	}
	b.topo.Close()
}

// prepare starts the backends and tunes the namespaces: conntrack active in
// the node (as on any node), wide client port ranges with TIME_WAIT reuse,
// backends that keep no TIME_WAIT sockets, and RPS so the node's receive
// processing (the data path) runs on dp-cpu however the load generator's
// CPU sends.
//
// The backends close first (Connection: close), so the TIME_WAIT sockets
// are theirs. A client port comes back to a backend within a phase and in
// the next one, through another variant: straight to the backend, through
// the ClusterIP or SNATed by the node. The client's TCP timestamp offset is
// keyed on the address it dials, so across variants a new SYN can carry an
// older timestamp than the backend's TIME_WAIT socket last saw. The backend
// then answers with an ACK of the old connection, the client resets it and
// retries the SYN after 1 s: a 1 s tail (and TcpExtTCPSynRetrans equal to
// TcpOutRsts) in the first phases after every variant change, the no-balancer
// one included. tcp_max_tw_buckets=0 in the backends drops TIME_WAIT there;
// the balancers under test are untouched.
func (b *bench) prepare() error {
	t := b.topo
	if err := t.TrackConnections(); err != nil {
		return err
	}
	for _, ns := range t.Backends {
		for port, serve := range map[string]func(net.Listener){":8080": serveShort, ":8081": serveSink} {
			l, err := ns.Listen(port)
			if err != nil {
				return err
			}
			b.stop = append(b.stop, func() { l.Close() })
			go serve(l)
		}
	}
	for _, ns := range t.Backends {
		if _, err := ns.Run("sysctl", "-qw", "net.ipv4.tcp_max_tw_buckets=0"); err != nil {
			return err
		}
	}
	for _, ns := range []labnet.NS{t.Client, t.External} {
		for _, s := range []string{"net.ipv4.ip_local_port_range=10000 65000", "net.ipv4.tcp_tw_reuse=1"} {
			if _, err := ns.Run("sysctl", "-qw", s); err != nil {
				return err
			}
		}
	}
	dp, cl := fmt.Sprintf("%x", 1<<b.o.dpCPU), fmt.Sprintf("%x", 1<<b.o.clientCPU)
	rps := map[labnet.NS]map[string]string{
		t.Node:     {"vc": dp, "ext0": dp},
		t.Client:   {"eth0": cl},
		t.External: {"eth0": cl},
	}
	for i, ns := range t.Backends {
		rps[t.Node][fmt.Sprintf("vb%d", i)] = dp
		rps[ns] = map[string]string{"eth0": dp}
	}
	for ns, devs := range rps {
		for dev, mask := range devs {
			if _, err := ns.Run("sh", "-c", fmt.Sprintf("echo %s > /sys/class/net/%s/queues/rx-0/rps_cpus", mask, dev)); err != nil {
				return fmt.Errorf("RPS for %s: %w", dev, err)
			}
		}
	}
	return nil
}

// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/swiftlane/swiftlane/internal/lb/labnet"
)

// phase is one variant's measurements on one path in one round.
type phase struct {
	CPS              float64          `json:"cps"`
	Requests         int64            `json:"requests"`
	WrkErrors        int64            `json:"wrk_errors"`
	LatencyUs        []float64        `json:"-"` // open-loop samples, pooled for the histogram
	P50us            float64          `json:"p50_us"`
	P99us            float64          `json:"p99_us"`
	P999us           float64          `json:"p99_9_us"`
	MaxUs            float64          `json:"max_us"`
	LatencyErrors    int64            `json:"latency_errors"`
	Late             int64            `json:"late_starts"` // loadgen fell behind its schedule
	Gbps             float64          `json:"throughput_gbps"`
	CPUusPerConn     float64          `json:"cpu_us_per_conn"`    // all CPUs busy time / connections (cps phase)
	DpCPUusPerConn   float64          `json:"dp_cpu_us_per_conn"` // the data path CPU only
	ConntrackEntries int              `json:"conntrack_entries"`
	Nstat            map[string]int64 `json:"nstat"` // deltas over the three phases, client + node + backends
}

// nstatCounters tell a latency tail caused by loss (retransmits, SYN
// retries, timeouts, drops at the listener) from one caused by queueing.
var nstatCounters = []string{
	"TcpRetransSegs", "TcpExtTCPSynRetrans", "TcpExtTCPTimeouts", "TcpAttemptFails", "TcpEstabResets",
	"TcpOutRsts", "TcpExtListenDrops", "TcpExtListenOverflows", "IpInDiscards", "IpOutNoRoutes", "TcpExtTCPLossProbes",
}

// target is where one path's load goes for a variant.
type target struct {
	from          labnet.NS
	addr          string
	port, dataPrt int
}

func (b *bench) targets(v string) (cip, np target) {
	t := b.topo
	if v == "none" { // the limit: straight to one backend, no translation
		be := t.BackendIPs[0].String()
		return target{t.Client, be, 8080, 8081}, target{t.External, be, 8080, 8081}
	}
	return target{t.Client, clusterIP.String(), 80, 5001}, target{t.External, t.NodeIP.String(), 30080, 30501}
}

func (b *bench) measureVariant(v string) (cip, np phase, err error) {
	b.variant = v
	done, err := b.setup(v)
	if err != nil {
		return cip, np, err
	}
	defer func() {
		done()
		if terr := teardown(b.topo, v); terr != nil && err == nil {
			err = fmt.Errorf("teardown: %w", terr)
		}
	}()
	c, n := b.targets(v)
	if cip, err = b.measurePath(c); err != nil {
		return cip, np, fmt.Errorf("ClusterIP: %w", err)
	}
	if np, err = b.measurePath(n); err != nil {
		return cip, np, fmt.Errorf("NodePort: %w", err)
	}
	return cip, np, nil
}

// setup installs variant v's NAT; the returned func undoes what teardown
// does not (stops swiftlane).
func (b *bench) setup(v string) (func(), error) {
	nop := func() {}
	switch v {
	case "none":
		return nop, nil
	case "iptables":
		return nop, applyIptables(b.topo, b.o.services)
	case "nftables":
		return nop, applyNft(b.topo, b.o.services)
	case "ipvs":
		return nop, applyIPVS(b.topo, b.o.services)
	case "swiftlane-nosweep":
		return b.startSwiftlane("-swiftlane", b.o.swiftlane, "--sweep-interval", "1h")
	case baselineVariant:
		return b.startSwiftlane("-baseline", b.o.baseline)
	}
	return b.startSwiftlane("-swiftlane", b.o.swiftlane)
}

// startSwiftlane runs `swiftlane lb` as its own process in the node's
// namespace, as on a node: its periodic sweep (expiring closed sessions)
// is scheduled by the kernel beside the backends, not inside this
// program's Go runtime, and its CPU time counts like any other. Without
// --pin-dir, stopping it detaches the program and drops every session, so
// the next variant starts clean. bin comes from the flag named by flag.
func (b *bench) startSwiftlane(flag, bin string, extra ...string) (func(), error) {
	if bin == "" {
		return nil, fmt.Errorf("%s: required: the path of a built swiftlane binary", flag)
	}
	cfg := filepath.Join(b.tmp, "services.yaml")
	if err := os.WriteFile(cfg, []byte(swiftlaneConfig(b.topo, b.o.services, b.o.sessionsMax)), 0o600); err != nil {
		return nil, err
	}
	args := append([]string{"--config", cfg, "--pin-dir", "", "--metrics-addr", metricsAddr}, extra...)
	lb, err := labnet.StartLB(b.topo.Node, bin, 30*time.Second, args...)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, bin, err)
	}
	return func() {
		// The data path's own counters: a drop here tells a loss from a tail.
		if m, err := b.swiftlaneCounters(); err == nil {
			fmt.Fprintf(os.Stderr, "   swiftlane data path: %s\n", m)
		} else {
			fmt.Fprintln(os.Stderr, "   swiftlane data path counters:", err)
		}
		lb.Stop(10 * time.Second)
	}, nil
}

// metricsAddr is swiftlane's /metrics inside the node's namespace.
const metricsAddr = "127.0.0.1:9465"

// swiftlaneCounters reads the drop, session and SNAT counters from
// swiftlane's /metrics.
func (b *bench) swiftlaneCounters() (string, error) {
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			return b.topo.Node.Dial(network, addr, 5*time.Second)
		},
	}}
	resp, err := c.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		for _, p := range []string{"swiftlane_lb_sessions_created_total", "swiftlane_lb_snat_allocations_total", "swiftlane_lb_neighbour_misses_total", "swiftlane_lb_drops_total"} {
			if strings.HasPrefix(l, p) {
				out = append(out, strings.TrimPrefix(l, "swiftlane_lb_"))
			}
		}
	}
	return strings.Join(out, ", "), sc.Err()
}

func (b *bench) measurePath(tg target) (phase, error) {
	var r phase
	url := fmt.Sprintf("%s:%d", tg.addr, tg.port)
	// Proves the path works and warms neighbour caches before measuring.
	if err := tg.from.Do(func() error { return request(url) }); err != nil {
		return r, fmt.Errorf("first request to %s: %w", url, err)
	}
	if _, err := b.topo.Node.Run("conntrack", "-F"); err != nil {
		return r, err
	}
	nsBefore, err := b.nstat()
	if err != nil {
		return r, err
	}

	cpuBefore, err := readCPU()
	if err != nil {
		return r, err
	}
	if err := b.wrk(tg, &r); err != nil {
		return r, err
	}
	cpuAfter, err := readCPU()
	if err != nil {
		return r, err
	}
	if r.Requests > 0 {
		r.CPUusPerConn = cpuAfter.busy(-1, cpuBefore) / float64(r.Requests)
		r.DpCPUusPerConn = cpuAfter.busy(b.o.dpCPU, cpuBefore) / float64(r.Requests)
	}
	if r.ConntrackEntries, err = b.topo.Node.ConntrackCount(); err != nil {
		return r, err
	}
	if err := b.latency(tg, &r); err != nil {
		return r, err
	}
	if err := b.stream(tg, &r); err != nil {
		return r, err
	}
	nsAfter, err := b.nstat()
	if err != nil {
		return r, err
	}
	r.Nstat = map[string]int64{}
	for _, k := range nstatCounters {
		r.Nstat[k] = nsAfter[k] - nsBefore[k]
	}
	fmt.Fprintf(os.Stderr, "   %-20s cps %7.0f  p50 %6.0f  p99 %6.0f  p99.9 %6.0f  max %7.0f µs  %5.2f Gbit/s  %5.1f µs CPU/conn  retrans %d  errors %d/%d\n",
		url, r.CPS, r.P50us, r.P99us, r.P999us, r.MaxUs, r.Gbps, r.CPUusPerConn, r.Nstat["TcpRetransSegs"], r.WrkErrors, r.LatencyErrors)
	return r, nil
}

// pinned runs argv in ns on the load generators' CPU.
func (b *bench) pinned(ns labnet.NS, argv ...string) (string, error) {
	return ns.Run(append([]string{"taskset", "-c", strconv.Itoa(b.o.clientCPU)}, argv...)...)
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }

// wrk: closed loop, one thread, new connection per request.
func (b *bench) wrk(tg target, r *phase) error {
	out, err := b.pinned(tg.from, b.o.wrk, "-t1", "-c"+strconv.Itoa(b.o.connections),
		"-d"+strconv.Itoa(max(1, int(b.o.duration.Seconds())))+"s", "--timeout", "5s",
		"-H", "Connection: close", fmt.Sprintf("http://%s:%d/", tg.addr, tg.port))
	if err != nil {
		return err
	}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 2 && f[0] == "Requests/sec:":
			r.CPS, _ = strconv.ParseFloat(f[1], 64)
		case len(f) >= 3 && f[1] == "requests" && f[2] == "in":
			r.Requests, _ = strconv.ParseInt(f[0], 10, 64)
		case len(f) >= 2 && f[0] == "Socket" && f[1] == "errors:":
			// Socket errors: connect 0, read 0, write 0, timeout 0
			for i := 2; i+1 < len(f); i += 2 {
				n, _ := strconv.ParseInt(strings.TrimSuffix(f[i+1], ","), 10, 64)
				r.WrkErrors += n
			}
		case strings.HasPrefix(strings.TrimSpace(l), "Non-2xx or 3xx responses:"):
			n, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
			r.WrkErrors += n
		}
	}
	if r.Requests == 0 {
		return fmt.Errorf("wrk completed no request:\n%s", out)
	}
	return nil
}

// latency: open loop at -rate from loadgen.
func (b *bench) latency(tg target, r *phase) error {
	argv := []string{b.o.loadgen, "latency", tg.addr, strconv.Itoa(tg.port), strconv.Itoa(b.o.rate), secs(b.o.duration)}
	if b.o.timesDir != "" {
		b.timesSeq++
		f := filepath.Join(b.o.timesDir, fmt.Sprintf("%03d-%s-%d.txt", b.timesSeq, b.variant, tg.port))
		argv = append([]string{"env", "LOADGEN_TIMES=" + f}, argv...)
	}
	out, err := b.pinned(tg.from, argv...)
	if err != nil {
		return err
	}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 1:
			v, err := strconv.ParseFloat(f[0], 64)
			if err == nil {
				r.LatencyUs = append(r.LatencyUs, v)
			}
		case len(f) == 2 && f[0] == "errors":
			r.LatencyErrors, _ = strconv.ParseInt(f[1], 10, 64)
		case len(f) == 2 && f[0] == "late":
			r.Late, _ = strconv.ParseInt(f[1], 10, 64)
		}
	}
	if len(r.LatencyUs) == 0 {
		return fmt.Errorf("loadgen measured no request:\n%s", out)
	}
	s := sortedCopy(r.LatencyUs)
	r.P50us, r.P99us, r.P999us, r.MaxUs = quantile(s, 0.50), quantile(s, 0.99), quantile(s, 0.999), s[len(s)-1]
	return nil
}

// stream: one connection's bulk throughput, half the phase length.
func (b *bench) stream(tg target, r *phase) error {
	d := b.o.duration / 2
	out, err := b.pinned(tg.from, b.o.loadgen, "stream", tg.addr, strconv.Itoa(tg.dataPrt), secs(d))
	if err != nil {
		return err
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "bytes" {
			n, _ := strconv.ParseFloat(f[1], 64)
			r.Gbps = n * 8 / d.Seconds() / 1e9
		}
	}
	if r.Gbps == 0 {
		return fmt.Errorf("stream moved nothing:\n%s", out)
	}
	return nil
}

// nstat sums the counters over the namespaces a connection crosses.
func (b *bench) nstat() (map[string]int64, error) {
	sum := map[string]int64{}
	for _, ns := range append([]labnet.NS{b.topo.Client, b.topo.External, b.topo.Node}, b.topo.Backends...) {
		// -a absolute, -s leave nstat's history alone, -z zeros too.
		out, err := ns.Run("nstat", "-asz")
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) >= 2 {
				n, err := strconv.ParseInt(f[1], 10, 64)
				if err == nil {
					sum[f[0]] += n
				}
			}
		}
	}
	return sum, nil
}

// cpuTimes are /proc/stat busy and total jiffies per CPU.
type cpuTimes map[int][2]float64

func readCPU() (cpuTimes, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, err
	}
	ct := cpuTimes{}
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		cpu := -1
		if f[0] != "cpu" {
			if cpu, err = strconv.Atoi(f[0][3:]); err != nil {
				continue
			}
		}
		var total, idle float64
		for i, v := range f[1:] {
			n, _ := strconv.ParseFloat(v, 64)
			total += n
			if i == 3 || i == 4 { // idle, iowait
				idle += n
			}
		}
		ct[cpu] = [2]float64{total - idle, total}
	}
	return ct, nil
}

// busy is the CPU time (µs) cpu (-1: all) was busy since before.
func (c cpuTimes) busy(cpu int, before cpuTimes) float64 {
	const usPerJiffy = 1e6 / 100 // USER_HZ
	return (c[cpu][0] - before[cpu][0]) * usPerJiffy
}

// SPDX-License-Identifier: Apache-2.0

// Command control benchmarks the control plane on loopback:
//
//   - propagation: PUT of a strategy -> a real agent has resolved it against
//     this machine's /proc and written it to its target (p50/p99 over
//     -changes writes, one at a time);
//   - fan-out: -agents simulated agents (a watch stream and a heartbeat each)
//     on one server, one change per second: p99 from the PUT to each agent's
//     receipt, and the server's CPU and memory.
//
// The server runs in a child process (this binary with -serve) so its CPU
// time and RSS are its own. It serves TLS with its generated certificate,
// as in production.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/swiftlane/swiftlane/internal/agent"
	"github.com/swiftlane/swiftlane/internal/api"
	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/auth"
	"github.com/swiftlane/swiftlane/internal/store"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

func main() {
	serve := flag.Bool("serve", false, "internal: run the server (child process)")
	dataDir := flag.String("data-dir", "", "internal: the child's data directory")
	out := flag.String("out", "bench/results/control.json", "result file")
	changes := flag.Int("changes", 200, "propagation: strategy writes to time")
	agents := flag.Int("agents", 500, "fan-out: simulated agents")
	fanout := flag.Int("fanout-changes", 30, "fan-out: changes, one per second")
	heartbeat := flag.Duration("heartbeat", 5*time.Second, "fan-out: each simulated agent's heartbeat period")
	flag.Parse()
	raiseFileLimit()
	if *serve {
		if err := runServer(*dataDir); err != nil {
			log.Fatal(err)
		}
		return
	}
	res, err := run(*changes, *agents, *fanout, *heartbeat)
	if err != nil {
		log.Fatal(err)
	}
	data, _ := json.MarshalIndent(res, "", "  ")
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", data)
}

func raiseFileLimit() {
	var l unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &l)
	}
}

// runServer is the child: serve until stdin closes (the parent exited).
func runServer(dir string) error {
	a, _, err := auth.LoadOrCreate(dir)
	if err != nil {
		return err
	}
	st, err := store.Open(dir)
	if err != nil {
		return err
	}
	defer st.Close()
	srv, err := api.New(api.Options{Store: st, Auth: a, Version: "bench"})
	if err != nil {
		return err
	}
	cert, err := auth.LoadOrCreateCert(dir, nil)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }()
	fmt.Println(ln.Addr().String()) // tells the parent we are ready
	return srv.Serve(ctx, ln, &cert)
}

type result struct {
	Generated          string  `json:"generated"`
	Kernel             string  `json:"kernel"`
	CPUs               int     `json:"cpus"`
	Transport          string  `json:"transport"`
	PropagationChanges int     `json:"propagation_changes"`
	PropagationP50Ms   float64 `json:"propagation_p50_ms"`
	PropagationP99Ms   float64 `json:"propagation_p99_ms"`
	PropagationMaxMs   float64 `json:"propagation_max_ms"`
	// The PUT alone (validation + fsynced store write), to tell apart.
	PutP50Ms     float64 `json:"propagation_put_p50_ms"`
	PutP99Ms     float64 `json:"propagation_put_p99_ms"`
	ProcsScanned int     `json:"propagation_processes_on_host"`
	// Where the propagation time goes, per stage, with the agent matching
	// from its process index (schedule mode: exec/fork/exit events keep it)
	// and, for comparison, re-reading /proc on every change (observe mode).
	Breakdown        *breakdown `json:"propagation_breakdown"`
	BreakdownRescan  *breakdown `json:"propagation_breakdown_rescan"`
	FanoutAgents     int        `json:"fanout_agents"`
	FanoutChanges    int        `json:"fanout_changes"`
	FanoutHeartbeatS float64    `json:"fanout_heartbeat_s"`
	FanoutP50Ms      float64    `json:"fanout_p50_ms"`
	FanoutP99Ms      float64    `json:"fanout_p99_ms"`
	FanoutMaxMs      float64    `json:"fanout_max_ms"`
	FanoutMissed     int        `json:"fanout_missed"`
	ServerCPUCores   float64    `json:"server_cpu_cores"`
	ServerRSSMB      float64    `json:"server_rss_mb"`
	ServerRSSPeakMB  float64    `json:"server_rss_peak_mb"`
	// The machine is shared: its load during the run, for reading the tails.
	LoadAvgStart string `json:"host_loadavg_start"`
	LoadAvgEnd   string `json:"host_loadavg_end"`
	Note         string `json:"note"`
}

func run(changes, agents, fanoutChanges int, heartbeat time.Duration) (*result, error) {
	dir, err := os.MkdirTemp("", "swiftlane-bench-control-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	child := exec.Command(self, "-serve", "-data-dir", dir)
	stdin, _ := child.StdinPipe()
	stdout, _ := child.StdoutPipe()
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		return nil, err
	}
	defer func() { stdin.Close(); child.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("server did not start: %w", err)
	}
	url := "https://" + strings.TrimSpace(line)
	signer, err := auth.LoadSigner(dir)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := auth.ClientTLS(filepath.Join(dir, auth.CertFile))
	if err != nil {
		return nil, err
	}
	mint := func(role auth.Role, node string) string {
		t, _, err := signer.Issue("bench", role, node, time.Hour)
		if err != nil {
			log.Fatal(err)
		}
		return t
	}
	admin := apiclient.NewClient(url, mint(auth.Admin, ""), tlsCfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var uts unix.Utsname
	_ = unix.Uname(&uts)
	res := &result{
		Generated: time.Now().UTC().Format(time.RFC3339), Kernel: unix.ByteSliceToString(uts.Release[:]), CPUs: runtime.NumCPU(),
		Transport: "HTTPS (TLS 1.3) on loopback, server in its own process, SSE watch streams",
		Note: "propagation: PUT until a real agent applied it (applier.Applier matching every process of this host from its process index, " +
			"as in schedule mode; recording target: no sched_ext here, so map_write times a map in memory, not a BPF map update); " +
			"propagation_breakdown*: the same path timed per stage, with the index and with a /proc rescan per change; " +
			"fan-out: simulated agents = watch stream + heartbeat each, in the benchmark process",
	}

	res.LoadAvgStart = loadavg()
	defer func() { res.LoadAvgEnd = loadavg() }()

	// Propagation through one real agent.
	pids, _ := applier.ListPIDs("/proc")
	res.ProcsScanned = len(pids)
	lat, put, err := propagation(ctx, url, tlsCfg, mint(auth.Agent, "bench-agent"), admin, changes)
	if err != nil {
		return nil, err
	}
	res.PutP50Ms, res.PutP99Ms = pct(put, 50), pct(put, 99)
	res.PropagationChanges = len(lat)
	res.PropagationP50Ms, res.PropagationP99Ms, res.PropagationMaxMs = pct(lat, 50), pct(lat, 99), pct(lat, 100)
	log.Printf("propagation: %d changes, p50 %.2f ms, p99 %.2f ms", len(lat), res.PropagationP50Ms, res.PropagationP99Ms)

	// Where the time goes: with the process index, and rescanning /proc.
	adminTok := mint(auth.Admin, "")
	if res.Breakdown, err = stages(ctx, url, tlsCfg, mint(auth.Agent, "bench-stages"), adminTok, changes, true); err != nil {
		return nil, err
	}
	if res.BreakdownRescan, err = stages(ctx, url, tlsCfg, mint(auth.Agent, "bench-stages"), adminTok, changes, false); err != nil {
		return nil, err
	}
	for _, b := range []*breakdown{res.Breakdown, res.BreakdownRescan} {
		log.Printf("stages (%s): total p99 %.2f ms; shares store %.2f, fan-out %.2f, match %.2f, write %.2f",
			b.Mode[:strings.Index(b.Mode, ":")], b.TotalP99Ms, b.ShareStore, b.ShareFanout, b.ShareMatch, b.ShareWrite)
	}

	// Fan-out.
	res.FanoutAgents, res.FanoutChanges, res.FanoutHeartbeatS = agents, fanoutChanges, heartbeat.Seconds()
	f, err := fanout(ctx, url, tlsCfg, mint, admin, agents, fanoutChanges, heartbeat, child.Process.Pid)
	if err != nil {
		return nil, err
	}
	res.FanoutP50Ms, res.FanoutP99Ms, res.FanoutMaxMs, res.FanoutMissed = pct(f.lat, 50), pct(f.lat, 99), pct(f.lat, 100), f.missed
	res.ServerCPUCores, res.ServerRSSMB, res.ServerRSSPeakMB = f.cpu, f.rss, f.peak
	log.Printf("fan-out: %d agents x %d changes, p99 %.2f ms, missed %d, server %.3f cores, %.1f MB", agents, fanoutChanges, res.FanoutP99Ms, f.missed, f.cpu, f.rss)
	return res, nil
}

func propagation(ctx context.Context, url string, tlsCfg *tls.Config, tok string, admin *apiclient.Client, n int) (lat, put []float64, err error) {
	applied := make(chan uint64, 16)
	// As in schedule mode: the process index, not a /proc rescan per change
	// (no scheduler here to send exec/exit events, so nothing updates it
	// during the run; the strategies match no process anyway).
	app := applier.New(applier.NewRecorder(), "/proc", "/sys/fs/cgroup", nil)
	if err := app.TrackProcesses(); err != nil {
		return nil, nil, err
	}
	a, err := agent.New(agent.Options{
		Client: apiclient.NewClient(url, tok, tlsCfg), Node: "bench-agent", Version: "bench", Interval: time.Minute,
		Applier: app, Mode: agent.ModeObserve,
		OnApplied: func(rev uint64) {
			select {
			case applied <- rev:
			default: // the timer below only needs the newest
			}
		},
	})
	if err != nil {
		return nil, nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go a.Run(actx)
	wait := func(rev uint64) error {
		timeout := time.After(30 * time.Second)
		for {
			select {
			case got := <-applied:
				if got >= rev {
					return nil
				}
			case <-timeout:
				return fmt.Errorf("agent did not apply revision %d within 30 s", rev)
			}
		}
	}
	if err := wait(0); err != nil { // initial sync
		return nil, nil, err
	}
	c := strategy.Critical
	for i := range n {
		s := apitypes.Strategy{Strategy: strategy.Strategy{Name: fmt.Sprintf("prop-%d", i%10), Class: &c, CommandRegex: fmt.Sprintf("bench-%d-never", i)}}
		start := time.Now()
		out, err := admin.PutStrategy(ctx, s)
		if err != nil {
			return nil, nil, err
		}
		put = append(put, ms(time.Since(start)))
		if err := wait(out.Revision); err != nil {
			return nil, nil, err
		}
		lat = append(lat, ms(time.Since(start)))
	}
	return lat, put, nil
}

// breakdown splits PUT -> applied into stages, timed where they happen:
// the store commit in the server (its Server-Timing header), request and
// fan-out (PUT sent until the agent has the watch event, less the commit),
// the agent's match (applying, less the target writes) and the target
// writes (BPF map updates in schedule mode; a recorder here).
type breakdown struct {
	Mode           string  `json:"mode"`
	Changes        int     `json:"changes"`
	TotalP50Ms     float64 `json:"total_p50_ms"`
	TotalP99Ms     float64 `json:"total_p99_ms"`
	StoreP50Ms     float64 `json:"store_commit_p50_ms"`
	StoreP99Ms     float64 `json:"store_commit_p99_ms"`
	FanoutP50Ms    float64 `json:"request_and_fanout_p50_ms"`
	FanoutP99Ms    float64 `json:"request_and_fanout_p99_ms"`
	MatchP50Ms     float64 `json:"agent_match_p50_ms"`
	MatchP99Ms     float64 `json:"agent_match_p99_ms"`
	WriteP50Ms     float64 `json:"map_write_p50_ms"`
	WriteP99Ms     float64 `json:"map_write_p99_ms"`
	ShareStore     float64 `json:"share_store_commit"`
	ShareFanout    float64 `json:"share_request_and_fanout"`
	ShareMatch     float64 `json:"share_agent_match"`
	ShareWrite     float64 `json:"share_map_write"`
	ProcsInIndex   int     `json:"processes_matched_per_change"`
	ProcfsReadsPer string  `json:"procfs_reads_per_change"`
}

// timedTarget sums the time spent in the wrapped target's writes.
type timedTarget struct {
	applier.Target
	mu sync.Mutex
	d  time.Duration
}

func (t *timedTarget) time(f func() error) error {
	start := time.Now()
	err := f()
	t.mu.Lock()
	t.d += time.Since(start)
	t.mu.Unlock()
	return err
}

func (t *timedTarget) take() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.d
	t.d = 0
	return d
}

func (t *timedTarget) SetProcess(tgid uint32, e applier.Entry) error {
	return t.time(func() error { return t.Target.SetProcess(tgid, e) })
}
func (t *timedTarget) DeleteProcess(tgid uint32) error {
	return t.time(func() error { return t.Target.DeleteProcess(tgid) })
}
func (t *timedTarget) SetCgroup(id uint64, e applier.Entry) error {
	return t.time(func() error { return t.Target.SetCgroup(id, e) })
}
func (t *timedTarget) DeleteCgroup(id uint64) error {
	return t.time(func() error { return t.Target.DeleteCgroup(id) })
}
func (t *timedTarget) Commit() error { return t.time(t.Target.Commit) }

// stages runs n changes through one real agent and times each stage.
func stages(ctx context.Context, url string, tlsCfg *tls.Config, agentTok, adminTok string, n int, track bool) (*breakdown, error) {
	target := &timedTarget{Target: applier.NewRecorder()}
	app := applier.New(target, "/proc", "/sys/fs/cgroup", nil)
	b := &breakdown{Mode: "rescan: every change re-reads each process in /proc (observe mode)", ProcfsReadsPer: "4 files per process"}
	if track {
		if err := app.TrackProcesses(); err != nil {
			return nil, err
		}
		b.Mode = "process index: exec/fork/exit events keep it, a change matches in memory (schedule mode)"
		b.ProcfsReadsPer = "one directory listing"
	}
	type mark struct {
		recv, applied time.Time
		write         time.Duration
	}
	var mu sync.Mutex
	marks := map[uint64]*mark{}
	applied := make(chan uint64, 16)
	a, err := agent.New(agent.Options{
		Client: apiclient.NewClient(url, agentTok, tlsCfg), Node: "bench-stages", Version: "bench", Interval: time.Hour,
		Applier: app, Mode: agent.ModeObserve,
		OnReceived: func(rev uint64) {
			target.take() // writes before this event are not its own
			mu.Lock()
			marks[rev] = &mark{recv: time.Now()}
			mu.Unlock()
		},
		OnApplied: func(rev uint64) {
			now, w := time.Now(), target.take()
			mu.Lock()
			if m := marks[rev]; m != nil {
				m.applied, m.write = now, w
			}
			mu.Unlock()
			select {
			case applied <- rev:
			default:
			}
		},
	})
	if err != nil {
		return nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go a.Run(actx)
	wait := func(rev uint64) error {
		timeout := time.After(30 * time.Second)
		for {
			select {
			case got := <-applied:
				if got >= rev {
					return nil
				}
			case <-timeout:
				return fmt.Errorf("agent did not apply revision %d within 30 s", rev)
			}
		}
	}
	if err := wait(0); err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 30 * time.Second}
	var total, storeD, fan, match, write []float64
	for i := range n {
		body := fmt.Sprintf(`{"class":"critical","command_regex":"stage-%d-never"}`, i)
		req, _ := http.NewRequestWithContext(ctx, "PUT", fmt.Sprintf("%s/api/v1/strategies/stage-%d", url, i%10), strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminTok)
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		var out apitypes.Strategy
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode >= 300 {
			return nil, fmt.Errorf("PUT: %d %v", resp.StatusCode, err)
		}
		var st float64
		fmt.Sscanf(resp.Header.Get("Server-Timing"), "store;dur=%g", &st)
		if err := wait(out.Revision); err != nil {
			return nil, err
		}
		mu.Lock()
		m := marks[out.Revision]
		mu.Unlock()
		if m == nil || m.applied.IsZero() {
			return nil, fmt.Errorf("revision %d applied without its receipt", out.Revision)
		}
		total = append(total, ms(m.applied.Sub(start)))
		storeD = append(storeD, st)
		fan = append(fan, math.Round(max(ms(m.recv.Sub(start))-st, 0)*1000)/1000)
		write = append(write, ms(m.write))
		match = append(match, max(ms(m.applied.Sub(m.recv)-m.write), 0))
	}
	pids, _ := applier.ListPIDs("/proc")
	b.Changes, b.ProcsInIndex = n, len(pids)
	b.TotalP50Ms, b.TotalP99Ms = pct(total, 50), pct(total, 99)
	b.StoreP50Ms, b.StoreP99Ms = pct(storeD, 50), pct(storeD, 99)
	b.FanoutP50Ms, b.FanoutP99Ms = pct(fan, 50), pct(fan, 99)
	b.MatchP50Ms, b.MatchP99Ms = pct(match, 50), pct(match, 99)
	b.WriteP50Ms, b.WriteP99Ms = pct(write, 50), pct(write, 99)
	sum := func(v []float64) float64 {
		t := 0.0
		for _, x := range v {
			t += x
		}
		return t
	}
	if all := sum(storeD) + sum(fan) + sum(match) + sum(write); all > 0 {
		round := func(x float64) float64 { return float64(int(x/all*1000+0.5)) / 1000 }
		b.ShareStore, b.ShareFanout, b.ShareMatch, b.ShareWrite = round(sum(storeD)), round(sum(fan)), round(sum(match)), round(sum(write))
	}
	return b, nil
}

type fanoutResult struct {
	lat            []float64
	missed         int
	cpu, rss, peak float64
}

func fanout(ctx context.Context, url string, tlsCfg *tls.Config, mint func(auth.Role, string) string, admin *apiclient.Client,
	agents, changes int, heartbeat time.Duration, serverPID int) (*fanoutResult, error) {
	// recv[i][rev] is when agent i saw revision rev. Once the last change's
	// revision is known, agents that have it are counted; allDone closes
	// when all have it.
	recv := make([]map[uint64]time.Time, agents)
	counted := make([]bool, agents)
	var mu sync.Mutex
	var last uint64
	nDone := 0
	allDone := make(chan struct{})
	mark := func(i int) { // with mu held
		if last != 0 && !counted[i] {
			if _, ok := recv[i][last]; ok {
				counted[i] = true
				if nDone++; nDone == agents {
					close(allDone)
				}
			}
		}
	}
	var connected sync.WaitGroup
	connected.Add(agents)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := range agents {
		recv[i] = map[uint64]time.Time{}
		node := fmt.Sprintf("sim-%d", i)
		c := apiclient.NewClient(url, mint(auth.Agent, node), tlsCfg)
		go func() {
			if _, err := c.RegisterNode(wctx, node, apitypes.Registration{Version: "sim", Mode: agent.ModeObserve, HeartbeatSeconds: max(1, int(heartbeat.Seconds()))}); err != nil {
				log.Printf("%s: register: %v", node, err)
			}
			go func() { // heartbeats, spread over the period
				t := time.NewTimer(time.Duration(rand.Int64N(int64(heartbeat))))
				defer t.Stop()
				for {
					select {
					case <-wctx.Done():
						return
					case <-t.C:
					}
					_, _ = c.Heartbeat(wctx, node, apitypes.Heartbeat{SchedulerState: "disabled", Workloads: []apitypes.Workload{}})
					t.Reset(heartbeat)
				}
			}()
			once := sync.Once{}
			_ = c.Watch(wctx, 0, func() { once.Do(connected.Done) }, func(ev apitypes.WatchEvent) error {
				now := time.Now()
				mu.Lock()
				recv[i][ev.Revision] = now
				mark(i)
				mu.Unlock()
				return nil
			})
			once.Do(connected.Done)
		}()
	}
	connected.Wait()
	log.Printf("fan-out: %d watch streams open", agents)

	cpu0, wall0 := cpuSeconds(serverPID), time.Now()
	posted := map[uint64]time.Time{}
	tick := time.NewTicker(time.Second)
	c := strategy.High
	var rev uint64
	for k := range changes {
		<-tick.C
		s := apitypes.Strategy{Strategy: strategy.Strategy{Name: fmt.Sprintf("fan-%d", k%5), Class: &c, CommandRegex: fmt.Sprintf("fan-%d", k)}}
		start := time.Now()
		out, err := admin.PutStrategy(ctx, s)
		if err != nil {
			return nil, err
		}
		posted[out.Revision] = start
		rev = out.Revision
	}
	tick.Stop()
	mu.Lock()
	last = rev
	for i := range agents {
		mark(i)
	}
	mu.Unlock()
	select {
	case <-allDone:
	case <-time.After(30 * time.Second):
		log.Printf("fan-out: not every agent had the last change after 30 s")
	}
	wall := time.Since(wall0).Seconds()
	cpu := (cpuSeconds(serverPID) - cpu0) / wall
	rss, peak := rssMB(serverPID)
	cancel()

	r := &fanoutResult{cpu: cpu, rss: rss, peak: peak}
	mu.Lock()
	defer mu.Unlock()
	for rev, t0 := range posted {
		for i := range recv {
			t, ok := recv[i][rev]
			if !ok {
				r.missed++
				continue
			}
			r.lat = append(r.lat, float64(t.Sub(t0).Microseconds())/1000)
		}
	}
	if len(r.lat) == 0 {
		return nil, errors.New("fan-out: no deliveries")
	}
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// cpuSeconds is a process's user+system CPU time from /proc/PID/stat.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// rssMB is a process's resident and peak resident memory in MB.
func rssMB(pid int) (rss, peak float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kb float64
		if _, err := fmt.Sscanf(line, "VmRSS: %f kB", &kb); err == nil {
			rss = kb / 1024
		}
		if _, err := fmt.Sscanf(line, "VmHWM: %f kB", &kb); err == nil {
			peak = kb / 1024
		}
	}
	return rss, peak
}

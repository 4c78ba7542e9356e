// SPDX-License-Identifier: Apache-2.0

// Package agent is the node side of the control plane: it registers the
// node, receives strategy changes by push (a watch stream resumed from the
// last revision it saw, never by polling), applies them through the
// scheduler-core Applier, and heartbeats the scheduler's counters and the
// processes each strategy resolved to. When the server is unreachable it
// keeps applying the last strategies it knew and reconnects with backoff;
// given several servers (API replicas sharing the Kubernetes store), it moves
// to the next one instead, and its watch resumes there.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swiftlane/swiftlane/internal/apiclient"
	"github.com/swiftlane/swiftlane/internal/apitypes"
	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/podcgroup"
	"github.com/swiftlane/swiftlane/internal/strategy"
)

// Modes an agent runs in.
const (
	// ModeSchedule: sched_ext is attached and strategies steer it.
	ModeSchedule = "schedule"
	// ModeObserve: no scheduler (e.g. the kernel lacks sched_ext); the agent
	// resolves and reports strategies but schedules nothing.
	ModeObserve = "observe"
)

// Options configure an Agent.
type Options struct {
	Client *apiclient.Client
	// Failover are further servers: replicas of Client's server on one
	// Kubernetes store, whose revisions are the same etcd revisions, so a
	// watch resumes on any of them. When the current server fails, the agent
	// moves to the next one at once, and backs off only after all failed.
	Failover []*apiclient.Client
	Node     string
	Labels   map[string]string
	Version  string
	Kernel   string
	// Interval is the heartbeat period (default 5 s).
	Interval time.Duration
	// Applier applies strategies: to the scheduler's maps, or to a
	// applier.Recorder in observe mode.
	Applier *applier.Applier
	// Mode is ModeSchedule or ModeObserve; Reason says why observe.
	Mode, Reason string
	// Stats reads the scheduler's counters (nil: none, e.g. observe mode).
	Stats func() (*apitypes.Counters, error)
	// SchedulerState reports sched_ext's state (nil: "unknown").
	SchedulerState func() string
	// Carriers lists what automatic mode prioritises (nil: automatic mode off).
	Carriers func() []apitypes.Carrier
	// StateFile keeps the last strategies so an agent restarted while the
	// server is down still applies them ("" : memory only).
	StateFile string
	// BackoffMin and BackoffMax bound reconnection delays (100 ms, 10 s).
	BackoffMin, BackoffMax time.Duration
	Log                    *slog.Logger
	// OnApplied runs after strategies at revision rev are applied (tests, bench).
	OnApplied func(rev uint64)
	// OnHeartbeat runs after each accepted heartbeat (tests).
	OnHeartbeat func()
	// OnReceived runs when a watch event arrives, before it is applied
	// (the benchmark's stage timing).
	OnReceived func(rev uint64)
	// ProcRoot is where the processes' cgroup files are read for the pod a
	// workload runs in (default /proc; tests use a fake tree).
	ProcRoot string
}

// Agent is one node's agent. Run it once.
type Agent struct {
	o       Options
	servers []*apiclient.Client // Client, then Failover
	cur     atomic.Int32        // index of the server in use

	mu         sync.Mutex
	strategies map[string]apitypes.Strategy
	rev        uint64 // last revision received
	applied    uint64 // revision of the strategies the Applier holds
	warned     map[string]bool
}

// stateFile is the agent's own file: the last revision it saw and the
// strategies as the server sent them (their API form).
type stateFile struct {
	Revision   uint64              `json:"revision"`
	Strategies []apitypes.Strategy `json:"strategies"`
}

// New prepares an agent and applies the strategies from its state file, if
// any, before the server is reached.
func New(o Options) (*Agent, error) {
	if o.Client == nil || o.Applier == nil || o.Node == "" {
		return nil, errors.New("agent: Client, Applier and Node are required")
	}
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	if o.BackoffMin <= 0 {
		o.BackoffMin = 100 * time.Millisecond
	}
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = max(10*time.Second, o.BackoffMin)
	}
	if o.Mode == "" {
		o.Mode = ModeSchedule
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	a := &Agent{o: o, servers: append([]*apiclient.Client{o.Client}, o.Failover...), strategies: map[string]apitypes.Strategy{}, warned: map[string]bool{}}
	if o.StateFile != "" {
		data, err := os.ReadFile(o.StateFile)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("state file: %w", err)
		default:
			var sf stateFile
			if err := json.Unmarshal(data, &sf); err != nil {
				o.Log.Warn("ignoring unreadable state file; waiting for the server", "file", o.StateFile, "err", err)
				break
			}
			for _, s := range sf.Strategies {
				a.strategies[s.Name] = s
			}
			a.rev = sf.Revision
			a.mu.Lock()
			a.applyLocked()
			a.mu.Unlock()
			o.Log.Info("applied the last known strategies", "revision", sf.Revision, "strategies", len(sf.Strategies))
		}
	}
	return a, nil
}

// Revision is the strategy revision currently applied.
func (a *Agent) Revision() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applied
}

// Run registers, watches and heartbeats until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	registered := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.heartbeats(ctx, registered)
	}()
	a.watch(ctx, registered)
	wg.Wait()
	return nil
}

// client is the server in use.
func (a *Agent) client() *apiclient.Client { return a.servers[a.cur.Load()] }

// Server is the index of the server in use: 0 for Client, i+1 for Failover[i].
func (a *Agent) Server() int { return int(a.cur.Load()) }

func (a *Agent) register(ctx context.Context) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := a.client().RegisterNode(rctx, a.o.Node, apitypes.Registration{
		Labels: a.o.Labels, Version: a.o.Version, Kernel: a.o.Kernel, Mode: a.o.Mode, Reason: a.o.Reason,
		HeartbeatSeconds: int(max(a.o.Interval.Round(time.Second), time.Second) / time.Second),
	})
	return err
}

// watch keeps one watch stream open, reconnecting with jittered exponential
// backoff. Each (re)connection registers first so the server knows this
// node's labels (they select strategies) and mode.
func (a *Agent) watch(ctx context.Context, registered chan struct{}) {
	backoff := a.o.BackoffMin
	once := sync.Once{}
	failed := 0 // servers failed in a row
	for ctx.Err() == nil {
		err := a.register(ctx)
		if err == nil {
			once.Do(func() { close(registered) })
			a.mu.Lock()
			since := a.rev
			a.mu.Unlock()
			err = a.client().Watch(ctx, since, func() {
				backoff, failed = a.o.BackoffMin, 0
				a.o.Log.Info("watching strategies", "from_revision", since, "server", a.Server())
			}, a.handle)
		}
		if ctx.Err() != nil {
			return
		}
		if apiclient.IsStatus(err, http.StatusUnauthorized) || apiclient.IsStatus(err, http.StatusForbidden) {
			a.o.Log.Error("the server refuses this agent's token; fix --token-file (swiftlane token create --role agent --node "+a.o.Node+")", "err", err)
		} else if failed+1 < len(a.servers) {
			a.o.Log.Warn("server unreachable; moving to the next", "server", a.Server(), "err", err)
		} else {
			a.o.Log.Warn("control plane unreachable; still applying the last known strategies", "err", err, "retry_in", backoff)
		}
		a.cur.Store(int32((int(a.cur.Load()) + 1) % len(a.servers)))
		if failed++; failed < len(a.servers) {
			continue // another replica may be up: no delay
		}
		failed = 0
		// Jitter spreads a fleet's reconnections after a server restart.
		delay := backoff/2 + rand.N(backoff/2+1)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		backoff = min(backoff*2, a.o.BackoffMax)
	}
}

// handle folds one watch event into the strategy set and applies it.
func (a *Agent) handle(ev apitypes.WatchEvent) error {
	if a.o.OnReceived != nil {
		a.o.OnReceived(ev.Revision)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch ev.Type {
	case "sync":
		clear(a.strategies)
		for _, s := range ev.Strategies {
			a.strategies[s.Name] = s
		}
	case "put":
		if ev.Strategy == nil {
			return fmt.Errorf("watch: put event without a strategy at revision %d", ev.Revision)
		}
		a.strategies[ev.Name] = *ev.Strategy
	case "delete":
		delete(a.strategies, ev.Name)
	default:
		return nil // newer servers may send more; ignore
	}
	a.rev = ev.Revision
	a.applyLocked()
	a.saveLocked()
	if a.o.OnApplied != nil {
		a.o.OnApplied(ev.Revision)
	}
	return nil
}

// set compiles the strategies this node can resolve, in precedence order.
func (a *Agent) setLocked() *strategy.Set {
	list := make([]apitypes.Strategy, 0, len(a.strategies))
	for _, s := range a.strategies {
		list = append(list, s)
	}
	apitypes.SortByPrecedence(list)
	plain := make([]strategy.Strategy, 0, len(list))
	for _, s := range list {
		// Namespaces need pod information this agent does not have; applying
		// the rest of the strategy alone would match too much.
		if len(s.Namespaces) > 0 {
			if !a.warned[s.Name] {
				a.o.Log.Warn("strategy needs pod information (namespaces); not applied on this node", "strategy", s.Name)
				a.warned[s.Name] = true
			}
			continue
		}
		if _, err := strategy.Compile([]strategy.Strategy{s.Strategy}); err != nil {
			a.o.Log.Warn("strategy rejected", "strategy", s.Name, "err", err)
			continue
		}
		plain = append(plain, s.Strategy)
	}
	set, _ := strategy.Compile(plain) // each one compiled above
	return set
}

func (a *Agent) applyLocked() {
	if err := a.o.Applier.SetStrategies(a.setLocked()); err != nil {
		a.o.Log.Warn("some strategies could not be applied", "err", err)
	}
	a.applied = a.rev
}

// saveLocked writes the state file atomically (temp file + rename).
func (a *Agent) saveLocked() {
	if a.o.StateFile == "" {
		return
	}
	sf := stateFile{Revision: a.rev, Strategies: make([]apitypes.Strategy, 0, len(a.strategies))}
	for _, s := range a.strategies {
		sf.Strategies = append(sf.Strategies, s)
	}
	apitypes.SortByPrecedence(sf.Strategies)
	data, _ := json.Marshal(sf)
	tmp := filepath.Join(filepath.Dir(a.o.StateFile), "."+filepath.Base(a.o.StateFile)+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		a.o.Log.Warn("state file not saved", "err", err)
		return
	}
	if err := os.Rename(tmp, a.o.StateFile); err != nil {
		a.o.Log.Warn("state file not saved", "err", err)
	}
}

// heartbeats reports status every Interval once registered.
func (a *Agent) heartbeats(ctx context.Context, registered <-chan struct{}) {
	select {
	case <-ctx.Done():
		return
	case <-registered:
	}
	tick := time.NewTicker(a.o.Interval)
	defer tick.Stop()
	for {
		a.heartbeat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *Agent) heartbeat(ctx context.Context) {
	if a.o.Mode == ModeObserve {
		// Without the scheduler there are no exec/fork events, so observe
		// mode re-resolves before each report to keep the workloads current.
		a.mu.Lock()
		if err := a.o.Applier.SetStrategies(a.setLocked()); err != nil {
			a.o.Log.Debug("resolve", "err", err)
		}
		a.mu.Unlock()
	}
	hb := apitypes.Heartbeat{SchedulerState: "unknown", AppliedRevision: a.Revision(), Workloads: []apitypes.Workload{}}
	if a.o.SchedulerState != nil {
		hb.SchedulerState = a.o.SchedulerState()
	}
	if a.o.Stats != nil {
		c, err := a.o.Stats()
		if err != nil {
			a.o.Log.Warn("read scheduler counters", "err", err)
		}
		hb.Counters = c
	}
	for _, p := range a.o.Applier.Applied() {
		w := apitypes.Workload{PID: p.PID, Strategy: p.Strategy, Class: p.Class.String(), Inherited: p.Inherited, Cmdline: p.Cmdline}
		// Without the Kubernetes API the pod's name is unknown, but its UID
		// and the container id are in the process's cgroup path.
		if pp, ok, err := podcgroup.PodOfProcess(a.o.ProcRoot, p.PID); err == nil && ok && !pp.Conmon {
			w.PodUID, w.ContainerID = pp.UID, pp.ContainerID
		}
		hb.Workloads = append(hb.Workloads, w)
	}
	if a.o.Carriers != nil {
		hb.Carriers = a.o.Carriers()
	}
	hb.Unmatchable = apitypes.UnmatchableOf(a.o.Applier.Unmatchable())
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := a.client()
	_, err := c.Heartbeat(hctx, a.o.Node, hb)
	if apiclient.IsStatus(err, http.StatusNotFound) { // the server forgot us (node deleted)
		if err = a.register(ctx); err == nil {
			_, err = c.Heartbeat(hctx, a.o.Node, hb)
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			a.o.Log.Debug("heartbeat failed", "err", err)
		}
		return
	}
	if a.o.OnHeartbeat != nil {
		a.o.OnHeartbeat()
	}
}

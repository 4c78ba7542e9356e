// SPDX-License-Identifier: Apache-2.0

package operator

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/config"
	"github.com/swiftlane/swiftlane/internal/strategy"
	"github.com/swiftlane/swiftlane/internal/trace"
)

// Automatic is the tracer and the operator running in the scheduler's
// process: events go from the ring buffer straight to the scheduler's map.
type Automatic struct {
	Tracer   *trace.Tracer
	Operator *Operator
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	rates    rates
}

// rates turns the tracer's cumulative packet counts into per-process rates.
// It samples when Carriers is called (an agent's heartbeat; a scrape reads
// Packets and leaves it alone), so a rate is the average since the previous
// sample, which is at least minRateWindow old: two calls close together
// share one sample.
type rates struct {
	mu   sync.Mutex
	at   time.Time
	last map[uint32]uint64
	pps  map[uint32]float64
}

const minRateWindow = time.Second

// update takes the packets per process at now and returns the rates.
func (r *rates) update(now time.Time, packets map[uint32]uint64) map[uint32]float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && now.Sub(r.at) < minRateWindow {
		return r.pps
	}
	pps := make(map[uint32]float64, len(packets))
	if !r.at.IsZero() {
		dt := now.Sub(r.at).Seconds()
		for tgid, n := range packets {
			// A process first counted now has no rate yet; a count that
			// went down was forgotten (an exit) or evicted from the LRU
			// map, and belongs to a new process with that PID.
			if prev, ok := r.last[tgid]; ok && n >= prev {
				pps[tgid] = float64(n-prev) / dt
			}
		}
	}
	r.at, r.last, r.pps = now, packets, pps
	return pps
}

// Carriers lists the prioritised processes with the packets each carried
// in its own context and their rate since the previous call (an agent's
// heartbeat). If the counts cannot be read, it returns the carriers
// without packets, and the error.
func (a *Automatic) Carriers() ([]Carrier, error) {
	return a.carriers(true)
}

// Packets is Carriers without the rates, for readers that take their own
// (a Prometheus scrape): it leaves the rate window to Carriers.
func (a *Automatic) Packets() ([]Carrier, error) {
	return a.carriers(false)
}

func (a *Automatic) carriers(rate bool) ([]Carrier, error) {
	cs := a.Operator.Carriers()
	counts, err := a.Tracer.Counts()
	if err != nil {
		return cs, err
	}
	var now time.Time
	if rate {
		now = a.Operator.opts.Now()
	}
	return a.withPackets(cs, counts, now), nil
}

// withPackets fills in the carriers' packets: the calls of the traced
// packet functions (trace.PacketFunctions) in each process's own context,
// or, for a process seen only in other functions (a custom function list),
// the calls of its busiest one; and their rates, sampled at now (zero: no
// rates).
func (a *Automatic) withPackets(cs []Carrier, counts []trace.Count, now time.Time) []Carrier {
	packets, busiest := map[uint32]uint64{}, map[uint32]uint64{}
	for _, c := range counts {
		if c.Context != trace.Process || c.TGID == 0 {
			continue
		}
		if trace.PacketFunctions[c.Function] {
			packets[c.TGID] += c.Packets
		}
		busiest[c.TGID] = max(busiest[c.TGID], c.Packets)
	}
	for tgid, n := range busiest {
		if _, ok := packets[tgid]; !ok {
			packets[tgid] = n
		}
	}
	var pps map[uint32]float64
	if !now.IsZero() {
		pps = a.rates.update(now, packets)
	}
	for i := range cs {
		cs[i].Packets = packets[cs[i].TGID]
		cs[i].PacketsPerSecond = pps[cs[i].TGID]
	}
	return cs
}

// EmitInterval is the tracer's per-(process, function) event gap for an idle
// timeout: several events per timeout keep a busy carrier's entry alive.
func EmitInterval(idle time.Duration) time.Duration {
	return min(idle/4, time.Second)
}

// Functions are the kernel functions automatic mode traces: the configured
// (or default) GTP-U ones, and the tun driver's when TUN devices are named.
func Functions(cfg config.Automatic) []string {
	fns := cfg.Functions
	if len(fns) == 0 {
		fns = trace.DefaultFunctions
	}
	if len(cfg.TUNDevices) == 0 {
		return fns
	}
	out := slices.Clone(fns)
	for _, fn := range trace.TUNFunctions {
		if !slices.Contains(out, fn) {
			out = append(out, fn)
		}
	}
	return out
}

// Companions turns the companion regexes into strategies.
func Companions(cfg config.Automatic) []strategy.Strategy {
	out := make([]strategy.Strategy, 0, len(cfg.Companions))
	for i, re := range cfg.Companions {
		class := cfg.Class
		out = append(out, strategy.Strategy{
			Name: fmt.Sprintf("auto-companion-%d", i), Class: &class, ExecutionTime: cfg.SliceNs, CommandRegex: re,
		})
	}
	return out
}

// StartAutomatic loads the tracer and runs the operator over app until
// Stop. While GTP-U traffic is carried, the companions are matched after
// app's strategies, whatever those are then (the config's or an
// agent's).
func StartAutomatic(cfg config.Automatic, app *applier.Applier, log *slog.Logger) (*Automatic, error) {
	companions, err := strategy.Compile(Companions(cfg))
	if err != nil {
		return nil, fmt.Errorf("automatic.companions: %w", err)
	}
	idle := time.Duration(cfg.IdleTimeoutMs) * time.Millisecond
	tr, err := trace.Load(trace.Options{Functions: Functions(cfg), EmitInterval: EmitInterval(idle), Log: log})
	if err != nil {
		return nil, fmt.Errorf("automatic.enabled: %w (or set automatic.enabled: false)", err)
	}
	op := New(app, Options{
		Class: cfg.Class, SliceNs: cfg.SliceNs, IdleTimeout: idle, TUNDevices: cfg.TUNDevices, Log: log,
		OnActive: func(active bool) {
			if companions.Len() == 0 {
				return
			}
			var extra *strategy.Set
			if active {
				extra = companions
			}
			if err := app.SetExtra(extra); err != nil {
				log.Warn("companion strategies", "active", active, "err", err)
			}
		},
	})
	a := &Automatic{Tracer: tr, Operator: op}
	app.OnExit(a.handleExit)
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.wg.Add(2)
	go func() {
		defer a.wg.Done()
		if err := tr.Run(ctx, op.Handle); err != nil {
			log.Warn("GTP-U tracer stopped", "err", err)
		}
	}()
	go func() {
		defer a.wg.Done()
		op.Run(ctx)
	}()
	log.Info("automatic mode: tracing GTP-U", "functions", tr.Functions(), "class", cfg.Class, "idle_timeout", idle,
		"sender_marks", tr.OwnershipNote() == "")
	return a, nil
}

// handleExit forgets an exited carrier in the operator and its counts in
// the tracer's map (an LRU that would otherwise hand them to the next
// process with that PID). Only carriers: a fork storm's exits cost nothing.
func (a *Automatic) handleExit(tgid uint32) {
	if a.Operator.exited(tgid) {
		if err := a.Tracer.Forget(tgid); err != nil {
			a.Operator.opts.Log.Debug("GTP-U counts of an exited carrier", "pid", tgid, "err", err)
		}
	}
}

// Stop detaches the tracer and stops the operator.
func (a *Automatic) Stop() error {
	a.cancel()
	a.wg.Wait()
	return a.Tracer.Close()
}

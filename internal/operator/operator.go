// SPDX-License-Identifier: Apache-2.0

// Package operator turns GTP-U trace events into scheduling entries: a
// process seen carrying GTP-U packets in its own context (a gNB's user-plane
// loop), or reading and writing a TUN device named in Options.TUNDevices (a
// UE simulator's tunnel), gets a class straight in the scheduler's map, and loses it when it
// exits or carries nothing for the idle timeout. Softirq work (pid 0,
// ksoftirqd, an interrupted task) is reported per CPU, never turned into an
// entry: prioritising the idle task or a random interrupted task would be
// wrong.
package operator

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/swiftlane/swiftlane/internal/applier"
	"github.com/swiftlane/swiftlane/internal/strategy"
	"github.com/swiftlane/swiftlane/internal/trace"
)

// Source tags the operator's entries in the strategy Applier.
const Source = "gtp-auto"

// Sink receives the operator's decisions: the strategy Applier (which writes
// the scheduler's map), or a recorder in tests.
type Sink interface {
	SetDynamic(tgid uint32, e applier.Entry, source string) error
	ClearDynamic(tgid uint32, source string) error
}

// Options configure an Operator. Zero clocks mean the real ones.
type Options struct {
	Class       strategy.Class
	SliceNs     uint64
	IdleTimeout time.Duration
	// TUNDevices are shell patterns of the TUN devices whose users are
	// carriers; events of other TUN devices are ignored.
	TUNDevices []string
	// OnActive is called with true when the first process starts carrying
	// GTP-U traffic and with false when the last one stops (companions).
	OnActive func(active bool)
	// Now is the wall clock for idle times; Monotonic the clock of the
	// events' timestamps in ns (trace.Monotonic); Alive says whether a
	// process still runs (default: /proc).
	Now       func() time.Time
	Monotonic func() uint64
	Alive     func(tgid uint32) bool
	Log       *slog.Logger
}

// Carrier is a process the operator prioritised.
type Carrier struct {
	TGID     uint32
	Comm     string
	Function string        // first function seen
	Since    time.Time     // when the entry was written
	LastSeen time.Time     // last event (events are at most one per emit interval)
	Latency  time.Duration // first packet → entry in the scheduler's map
	// Packets the process carried in its own context since the tracer
	// loaded, and their rate; filled by Automatic.Carriers.
	Packets          uint64
	PacketsPerSecond float64
}

// Class is the class the operator gives carriers.
func (o *Operator) Class() strategy.Class { return o.entry.Class }

// CPUReport is GTP-U work seen in softirq on one CPU.
type CPUReport struct {
	CPU      uint32
	Context  trace.Context // of the latest event
	seen     uint32        // bit per context logged for this CPU
	Events   uint64
	LastSeen time.Time
}

// Operator is safe for concurrent use: trace events, exit events and the
// expiry timer arrive on different goroutines.
type Operator struct {
	mu        sync.Mutex
	sink      Sink
	opts      Options
	entry     applier.Entry
	carriers  map[uint32]*Carrier
	cpus      map[uint32]*CPUReport
	latencies []time.Duration
	active    bool
	wake      chan struct{}
	// TUN devices whose users were not prioritised, logged once each.
	otherTUNs map[string]bool
}

// New returns an Operator writing to sink.
func New(sink Sink, opts Options) *Operator {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Monotonic == nil {
		opts.Monotonic = trace.Monotonic
	}
	if opts.Alive == nil {
		opts.Alive = procAlive
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 5 * time.Second
	}
	return &Operator{
		sink: sink, opts: opts,
		entry:     applier.Entry{Class: opts.Class, SliceNs: opts.SliceNs},
		carriers:  map[uint32]*Carrier{},
		cpus:      map[uint32]*CPUReport{},
		wake:      make(chan struct{}, 1),
		otherTUNs: map[string]bool{},
	}
}

// Handle takes one trace event.
func (o *Operator) Handle(ev trace.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if trace.IsTUN(ev.Function) && !o.tunMatches(ev.Ifname) {
		if !o.otherTUNs[ev.Ifname] {
			o.otherTUNs[ev.Ifname] = true
			o.opts.Log.Info("TUN device not in automatic.tun_devices: its users are not prioritised",
				"device", ev.Ifname, "pid", ev.TGID, "comm", ev.Comm)
		}
		return
	}
	now := o.opts.Now()
	if ev.Context != trace.Process {
		r, ok := o.cpus[ev.CPU]
		if !ok {
			r = &CPUReport{CPU: ev.CPU}
			o.cpus[ev.CPU] = r
		}
		if bit := uint32(1) << (ev.Context & 31); r.seen&bit == 0 { // once per CPU and context
			r.seen |= bit
			o.opts.Log.Info("GTP-U work in softirq: reported as its CPU, not prioritised",
				"cpu", ev.CPU, "context", ev.Context, "function", ev.Function, "ifindex", ev.Ifindex, "comm", ev.Comm)
		}
		r.Events++
		r.Context = ev.Context
		r.LastSeen = now
		return
	}
	if c, ok := o.carriers[ev.TGID]; ok {
		c.LastSeen = now
		return
	}
	// A late event of a process that already exited must not leave an entry
	// behind for a recycled PID.
	if !o.opts.Alive(ev.TGID) {
		return
	}
	if err := o.sink.SetDynamic(ev.TGID, o.entry, Source); err != nil {
		o.opts.Log.Warn("GTP-U carrier not prioritised", "pid", ev.TGID, "comm", ev.Comm, "err", err)
		return // retried on its next event
	}
	lat := time.Duration(o.opts.Monotonic() - ev.KtimeNs)
	if ev.KtimeNs == 0 || lat < 0 {
		lat = 0
	}
	o.carriers[ev.TGID] = &Carrier{TGID: ev.TGID, Comm: ev.Comm, Function: ev.Function, Since: now, LastSeen: now, Latency: lat}
	o.latencies = append(o.latencies, lat)
	o.opts.Log.Info("GTP-U carrier prioritised", "pid", ev.TGID, "comm", ev.Comm, "class", o.entry.Class,
		"function", ev.Function, "first_packet_to_map_ms", fmt.Sprintf("%.3f", float64(lat)/1e6))
	o.setActiveLocked()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// tunMatches says whether a TUN device's users are carriers. A name the
// tracer could not read never matches.
func (o *Operator) tunMatches(name string) bool {
	if name == "" {
		return false
	}
	for _, p := range o.opts.TUNDevices {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

// HandleExit forgets a process that exited. The scheduler already removed
// its entry from the map (and the Applier its dynamic entry).
func (o *Operator) HandleExit(tgid uint32) { o.exited(tgid) }

// exited is HandleExit, saying whether the process was a carrier.
func (o *Operator) exited(tgid uint32) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.carriers[tgid]
	if ok {
		delete(o.carriers, tgid)
		o.opts.Log.Info("GTP-U carrier exited", "pid", tgid, "comm", c.Comm)
		o.setActiveLocked()
	}
	return ok
}

// Expire removes the entries of processes idle for the idle timeout and
// returns when the next one would expire (zero: none left).
func (o *Operator) Expire() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.opts.Now()
	var next time.Time
	for tgid, c := range o.carriers {
		at := c.LastSeen.Add(o.opts.IdleTimeout)
		if !now.Before(at) {
			if err := o.sink.ClearDynamic(tgid, Source); err != nil {
				o.opts.Log.Warn("GTP-U carrier entry not removed", "pid", tgid, "err", err)
				continue // retried on the next expiry
			}
			delete(o.carriers, tgid)
			o.opts.Log.Info("GTP-U carrier idle: entry removed", "pid", tgid, "comm", c.Comm, "idle", now.Sub(c.LastSeen))
			continue
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	for cpu, r := range o.cpus {
		if now.Sub(r.LastSeen) >= o.opts.IdleTimeout {
			delete(o.cpus, cpu)
		}
	}
	o.setActiveLocked()
	return next
}

func (o *Operator) setActiveLocked() {
	active := len(o.carriers) > 0
	if active == o.active {
		return
	}
	o.active = active
	if o.opts.OnActive != nil {
		o.opts.OnActive(active)
	}
}

// Run expires idle entries until ctx ends. It sleeps until the next expiry
// (or a new carrier): no polling.
func (o *Operator) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d := time.Hour
		if next := o.Expire(); !next.IsZero() {
			d = time.Until(next)
		}
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-o.wake:
		}
	}
}

// Carriers lists the prioritised processes by PID.
func (o *Operator) Carriers() []Carrier {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Carrier, 0, len(o.carriers))
	for _, c := range o.carriers {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TGID < out[j].TGID })
	return out
}

// CPUs lists the CPUs seen running GTP-U work in softirq.
func (o *Operator) CPUs() []CPUReport {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]CPUReport, 0, len(o.cpus))
	for _, r := range o.cpus {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CPU < out[j].CPU })
	return out
}

// Latencies are the first-packet → entry-in-map times, in order.
func (o *Operator) Latencies() []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]time.Duration(nil), o.latencies...)
}

// procAlive is false once a process is gone or a zombie.
func procAlive(tgid uint32) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", tgid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	st := s[i+2]
	return st != 'Z' && st != 'X'
}

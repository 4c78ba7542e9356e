// SPDX-License-Identifier: Apache-2.0

// Package trace follows packets along the kernel's GTP-U path: fentry
// programs on the functions of the in-tree gtp module (and of the
// out-of-tree gtp5g module when it is loaded) report which task, on which
// CPU and in which context, runs them. The same programs on the tun
// driver's read and write paths find the processes that move a TUN
// device's packets (a UE simulator's tunnel). Events come through a BPF ring buffer;
// per-(process, function) and per-(CPU, function, context) counts are kept
// in maps as well, so nothing is lost when user space falls behind.
package trace

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/swiftlane/swiftlane/internal/percpu"
)

// DefaultFunctions are the GTP-U functions worth tracing (spec §2): the
// in-tree gtp module's and gtp5g's. Absent or inlined ones are skipped.
var DefaultFunctions = []string{
	"gtp_encap_recv", "gtp_rx", "gtp_dev_xmit", "gtp_push_header", "gtp_build_skb_outer_ip4",
	"gtp5g_encap_recv", "gtp5g_handle_skb_ipv4", "gtp5g_xmit_skb_ipv4", "gtp5g_push_header",
	"pdr_find_by_gtp1u", "ip4_find_route",
}

// TUNFunctions are the tun driver's per-packet paths, both called in the
// system call of the process that owns the device's file: tun_get_user
// takes a packet the process writes, tun_do_read hands one to the process.
// Both take the struct tun_struct *, from which the device is read.
var TUNFunctions = []string{"tun_get_user", "tun_do_read"}

// IsTUN says whether fn is one of TUNFunctions.
func IsTUN(fn string) bool { return slices.Contains(TUNFunctions, fn) }

// PacketFunctions are the functions each GTP-U (or TUN) packet passes
// exactly once (the modules' receive and transmit entry points): counting
// their calls counts packets, where summing all traced functions would
// count a packet once per function on its path.
var PacketFunctions = map[string]bool{
	"gtp_encap_recv": true, "gtp_dev_xmit": true,
	"gtp5g_encap_recv": true, "gtp5g_handle_skb_ipv4": true,
	"tun_get_user": true, "tun_do_read": true,
}

// DefaultModules are searched, in order, for the functions' BTF.
var DefaultModules = []string{"gtp", "gtp5g", "tun"}

// ErrNoFunctions means none of the requested functions could be traced.
var ErrNoFunctions = errors.New("no GTP-U function could be traced")

// MaxFunctions is how many functions one tracer traces at most
// (GTP_MAX_FUNCS in bpf/gtp.h: the per-CPU counts have a slot per function
// and context).
const MaxFunctions = len(gtpGtpCpuCounts{}.C) / len(contextNames)

// Context says who ran a traced function.
type Context uint32

const (
	// Process: a user task in a system call that moves packets or TUN data
	// (read, write, send*, recv*, ...); it carries the packet.
	Process Context = 0
	// Idle: softirq on an idle CPU (pid 0).
	Idle Context = 1
	// KernelThread: ksoftirqd, a NAPI thread or a worker.
	KernelThread Context = 2
	// Interrupt: softirq on IRQ exit, on top of whatever user task was running
	// (in user mode, or in a system call that moves no packets).
	Interrupt Context = 3
	// Backlog: a user task in a system call that moves packets, whose
	// NET_RX softirq ran a packet the task did not send (another sender's
	// backlog, a qdisc's delayed packets, a reply built in the softirq).
	Backlog Context = 4
)

var contextNames = [...]string{"process", "idle", "kthread", "interrupt", "backlog"}

func (c Context) String() string {
	if int(c) < len(contextNames) {
		return contextNames[c]
	}
	return fmt.Sprintf("context(%d)", uint32(c))
}

// Event is one traced call (the first of a task, then at most one per
// Options.EmitInterval).
type Event struct {
	KtimeNs  uint64 // CLOCK_MONOTONIC, ns (see Monotonic)
	PID      uint32 // thread id
	TGID     uint32 // process id; 0 for the idle task
	Comm     string
	CPU      uint32
	Function string
	Ifindex  uint32
	Ifname   string // the device's name in its namespace; "" if unknown
	Context  Context
}

// Count is the number of calls of one function per process (Context
// Process) or per CPU and context (other contexts, TGID 0).
type Count struct {
	TGID     uint32
	CPU      uint32 // meaningful unless Context is Process
	Function string
	Context  Context
	Packets  uint64
}

// Options configure Load.
type Options struct {
	// Functions to trace; DefaultFunctions when empty.
	Functions []string
	// Modules searched for the functions' BTF; DefaultModules when empty.
	// vmlinux is searched too (for a gtp built into the kernel).
	Modules []string
	// EmitInterval is the minimum gap between two events of the same task
	// and function; 0 reports every call.
	EmitInterval time.Duration
	Log          *slog.Logger
}

// Tracer is a loaded and attached GTP-U tracer. Read and Close may be called
// from different goroutines; Counts is safe for concurrent use.
type Tracer struct {
	funcs   []string // by func id
	skipped map[string]string
	progs   []*ebpf.Program
	links   []link.Link
	maps    []*ebpf.Map // all of them, shared by every program
	events  *ebpf.Map
	counts  *ebpf.Map // per process
	cpuWork *ebpf.Map // per CPU, function and context
	drops   *ebpf.Map
	epoch   *ebpf.Map // advanced every emit interval
	reader  *ringbuf.Reader
	// stopEpochs stops the goroutine that advances gtp_epoch (nil: none).
	stopEpochs func()
	// ownNote says how packets a call's softirq runs are told apart
	// ("" when the sender marks are attached).
	ownNote string
}

// progFentry is the program loaded once per traced function.
const progFentry = "gtp_fentry"

// ownershipProgs are loaded once beside it (see owner() in bpf/gtp.bpf.c):
// marks on the GTP-U packets processes send.
var ownershipProgs = []string{"mark_ip4", "mark_ip6"}

type target struct {
	name                   string
	skbArg, devArg, tunArg int32
}

// Load resolves the functions in the kernel's BTF, loads one program per
// function and attaches it. Functions that are absent are skipped with a
// one-line notice (Skipped); if none is left, the error wraps ErrNoFunctions
// and says what is missing.
func Load(opts Options) (*Tracer, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	funcs := opts.Functions
	if len(funcs) == 0 {
		funcs = DefaultFunctions
	}
	modules := opts.Modules
	if len(modules) == 0 {
		modules = DefaultModules
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("remove memlock limit: %w", err)
	}

	t := &Tracer{skipped: map[string]string{}}
	// One parse of the kernel's BTF for everything below (each module's
	// spec and each load would otherwise read vmlinux again).
	cache := btf.NewCache()
	targets, moduleNotes := resolve(cache, funcs, modules, t.skipped)
	for _, fn := range funcs {
		if why, ok := t.skipped[fn]; ok {
			log.Info("GTP-U function not traced", "function", fn, "reason", why)
		}
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoFunctions, strings.Join(moduleNotes, "; "))
	}
	if len(targets) > MaxFunctions {
		for _, tg := range targets[MaxFunctions:] {
			why := fmt.Sprintf("more than %d functions requested: list at most %d (automatic.functions or --functions)", MaxFunctions, MaxFunctions)
			t.skipped[tg.name] = why
			log.Info("GTP-U function not traced", "function", tg.name, "reason", why)
		}
		targets = targets[:MaxFunctions]
	}

	spec, err := loadGtp()
	if err != nil {
		return nil, fmt.Errorf("parse BPF object: %w", err)
	}
	shared := map[string]*ebpf.Map{}
	// The marks go first: the programs see softirqs only if they are in,
	// else a call's own packets would be backlog too.
	if err := t.loadOwnership(spec, shared, cache); err != nil {
		t.ownNote = err.Error()
		log.Warn("GTP-U packets run in a packet-moving call's softirq are credited to that call, whoever sent them", "reason", err)
		if err := setProbe(spec, softirqProbe{}); err != nil {
			return nil, err
		}
	}
	for _, tg := range targets {
		if err := t.loadOne(spec, tg, opts.EmitInterval, shared, cache); err != nil {
			log.Info("GTP-U function not traced", "function", tg.name, "reason", err)
			t.skipped[tg.name] = err.Error()
			continue
		}
		t.funcs = append(t.funcs, tg.name)
	}
	for _, m := range shared {
		t.maps = append(t.maps, m)
	}
	t.events, t.counts, t.drops = shared[gtpMapGtpEvents], shared[gtpMapGtpCounts], shared[gtpMapGtpDrops]
	t.cpuWork, t.epoch = shared[gtpMapGtpCpuWork], shared[gtpMapGtpEpoch]
	if len(t.funcs) == 0 {
		t.Close()
		return nil, fmt.Errorf("%w: every attach failed (see the notices above)", ErrNoFunctions)
	}
	if t.reader, err = ringbuf.NewReader(t.events); err != nil {
		t.Close()
		return nil, fmt.Errorf("open event ring: %w", err)
	}
	if opts.EmitInterval > 0 {
		t.stopEpochs = advanceEpochs(t.epoch, opts.EmitInterval, log)
	}
	return t, nil
}

// advanceEpochs adds one to gtp_epoch every interval until the returned
// stop is called: the programs record a busy key's call once per epoch, so
// they need no clock to rate-limit their records.
func advanceEpochs(m *ebpf.Map, every time.Duration, log *slog.Logger) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for epoch := uint64(1); ; epoch++ {
			if err := m.Update(uint32(0), epoch, ebpf.UpdateAny); err != nil {
				// Records then stop after each key's first: say so once.
				log.Warn("GTP-U tracer: emit epoch not advanced, busy processes and CPUs send no more events", "err", err)
				return
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// loadOne loads and attaches the program for one function; the first load
// creates the maps the others share.
func (t *Tracer) loadOne(spec *ebpf.CollectionSpec, tg target, every time.Duration, shared map[string]*ebpf.Map, cache *btf.Cache) error {
	s := spec.Copy()
	err := setVars(s, map[string]any{
		"func_id": uint32(len(t.funcs)), "skb_arg": tg.skbArg, "dev_arg": tg.devArg, "tun_arg": tg.tunArg, "emit_interval_ns": uint64(every.Nanoseconds()),
	})
	if err != nil {
		return err
	}
	keepPrograms(s, progFentry)
	s.Programs[progFentry].AttachTo = tg.name
	opts := ebpf.CollectionOptions{Cache: cache}
	if len(shared) > 0 {
		opts.MapReplacements = shared
	}
	coll, err := ebpf.NewCollectionWithOptions(s, opts)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return fmt.Errorf("BPF verifier rejected the tracer: %+v", ve)
		}
		return fmt.Errorf("load: %w", err)
	}
	prog := coll.DetachProgram(progFentry)
	adoptMaps(coll, shared)
	coll.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: prog})
	if err != nil {
		prog.Close()
		return fmt.Errorf("attach fentry: %w", err)
	}
	t.progs = append(t.progs, prog)
	t.links = append(t.links, l)
	return nil
}

// keepPrograms drops every program but names from a copy of the object, so
// loading it loads only those (the maps all come along).
func keepPrograms(s *ebpf.CollectionSpec, names ...string) {
	for name := range s.Programs {
		if !slices.Contains(names, name) {
			delete(s.Programs, name)
		}
	}
}

// adoptMaps keeps the first collection's maps for the ones after it.
func adoptMaps(coll *ebpf.Collection, shared map[string]*ebpf.Map) {
	if len(shared) > 0 {
		return
	}
	for m := range coll.Maps {
		if !strings.HasPrefix(m, ".") { // not the constants
			shared[m] = coll.DetachMap(m)
		}
	}
}

// setVars sets constants of the object (bpf/gtp.bpf.c's const volatiles).
func setVars(spec *ebpf.CollectionSpec, vars map[string]any) error {
	for name, v := range vars {
		if err := spec.Variables[name].Set(v); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
	}
	return nil
}

// setProbe sets where the programs read the preempt count (zero: nowhere).
func setProbe(spec *ebpf.CollectionSpec, p softirqProbe) error {
	return setVars(spec, map[string]any{"preempt_count_addr": p.preemptCount, "per_cpu_offset_addr": p.perCPUOffset})
}

// loadOwnership finds the softirq probe, sets it in spec, and loads and
// attaches the sender marks; the first to load, it creates the shared maps.
// The IPv4 mark is required (without IPv6's, IPv6 GTP-U a process sends
// counts as backlog inside a softirq).
func (t *Tracer) loadOwnership(spec *ebpf.CollectionSpec, shared map[string]*ebpf.Map, cache *btf.Cache) error {
	probe, err := loadSoftirqProbe(cache)
	if err != nil {
		return fmt.Errorf("no softirq probe: %w", err)
	}
	if err := setProbe(spec, probe); err != nil {
		return err
	}
	s := spec.Copy()
	keepPrograms(s, ownershipProgs...)
	coll, err := ebpf.NewCollectionWithOptions(s, ebpf.CollectionOptions{Cache: cache})
	if err != nil {
		return fmt.Errorf("load the sender marks: %w", err)
	}
	defer coll.Close()
	var progs []*ebpf.Program
	var links []link.Link
	undo := func(err error) error {
		for _, l := range links {
			l.Close()
		}
		for _, p := range progs {
			p.Close()
		}
		return err
	}
	for _, name := range ownershipProgs {
		prog := coll.DetachProgram(name)
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			prog.Close()
			if name == "mark_ip6" {
				continue
			}
			return undo(fmt.Errorf("attach %s: %w", name, err))
		}
		progs, links = append(progs, prog), append(links, l)
	}
	adoptMaps(coll, shared)
	t.progs, t.links = append(t.progs, progs...), append(t.links, links...)
	return nil
}

// OwnershipNote is "" when a packet-moving call is credited only with the
// GTP-U packets it sent itself, else why it is credited with whatever its
// softirq runs.
func (t *Tracer) OwnershipNote() string { return t.ownNote }

// resolve finds each function's BTF and the positions of its sk_buff,
// net_device and tun_struct arguments. It fills skipped and returns notes on missing modules.
func resolve(cache *btf.Cache, funcs, modules []string, skipped map[string]string) ([]target, []string) {
	var specs []*btf.Spec
	var notes []string
	for _, m := range modules {
		s, err := cache.Module(m)
		if err != nil {
			notes = append(notes, moduleNote(m))
			continue
		}
		specs = append(specs, s)
	}
	if s, err := cache.Kernel(); err == nil {
		specs = append(specs, s)
	} else {
		notes = append(notes, fmt.Sprintf("no kernel BTF (%v): CONFIG_DEBUG_INFO_BTF is required", err))
	}
	var out []target
	for _, fn := range funcs {
		var f *btf.Func
		for _, s := range specs {
			if err := s.TypeByName(fn, &f); err == nil {
				break
			}
			f = nil
		}
		if f == nil {
			skipped[fn] = "not in the kernel's or the modules' BTF (module not loaded, or the function is inlined)"
			continue
		}
		tg := target{name: fn, skbArg: -1, devArg: -1, tunArg: -1}
		if proto, ok := f.Type.(*btf.FuncProto); ok {
			for i, p := range proto.Params {
				switch pointee(p.Type) {
				case "sk_buff":
					if tg.skbArg < 0 {
						tg.skbArg = int32(i)
					}
				case "net_device":
					if tg.devArg < 0 {
						tg.devArg = int32(i)
					}
				case "tun_struct":
					if tg.tunArg < 0 {
						tg.tunArg = int32(i)
					}
				}
			}
		}
		out = append(out, tg)
	}
	if len(out) == 0 {
		notes = append(notes, "none of the functions "+strings.Join(funcs, ", ")+" was found")
	}
	return out, notes
}

// moduleNote says why a module's BTF is missing and what to do.
func moduleNote(m string) string {
	if _, err := os.Stat("/sys/module/" + m); err != nil {
		return fmt.Sprintf("module %s is not loaded (no /sys/kernel/btf/%s): run `modprobe %s` if this node uses it", m, m, m)
	}
	return fmt.Sprintf("module %s is loaded but has no BTF (/sys/kernel/btf/%s): fentry needs a kernel built with CONFIG_DEBUG_INFO_BTF_MODULES and a module built against it", m, m)
}

// pointee names the struct a parameter points to ("" otherwise).
func pointee(t btf.Type) string {
	p, ok := btf.UnderlyingType(t).(*btf.Pointer)
	if !ok {
		return ""
	}
	if s, ok := btf.UnderlyingType(p.Target).(*btf.Struct); ok {
		return s.Name
	}
	return ""
}

// Functions lists the traced functions.
func (t *Tracer) Functions() []string { return append([]string(nil), t.funcs...) }

// Skipped maps each function that is not traced to the reason.
func (t *Tracer) Skipped() map[string]string { return t.skipped }

// Read blocks until the next event; it fails once the tracer is closed.
func (t *Tracer) Read() (Event, error) {
	rec, err := t.reader.Read()
	if err != nil {
		return Event{}, err
	}
	var raw gtpGtpEvent
	if err := binary.Read(bytes.NewReader(rec.RawSample), binary.LittleEndian, &raw); err != nil {
		return Event{}, fmt.Errorf("decode event: %w", err)
	}
	return Event{
		KtimeNs: raw.TsNs, PID: raw.Pid, TGID: raw.Tgid, Comm: cString(raw.Comm[:]), CPU: raw.Cpu,
		Function: t.funcName(raw.Func), Ifindex: raw.Ifindex, Ifname: cString(raw.Ifname[:]), Context: Context(raw.Ctx),
	}, nil
}

// Run calls handle for every event until ctx ends (it returns nil) or the
// ring fails.
func (t *Tracer) Run(ctx context.Context, handle func(Event)) error {
	stop := context.AfterFunc(ctx, func() { t.reader.Close() })
	defer stop()
	for {
		ev, err := t.Read()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		handle(ev)
	}
}

// Counts returns the per-process and per-CPU call counts.
func (t *Tracer) Counts() ([]Count, error) {
	var out []Count
	var k gtpGtpKey
	var v gtpGtpCount
	it := t.counts.Iterate()
	for it.Next(&k, &v) {
		out = append(out, Count{TGID: k.Tgid, CPU: processCPU, Function: t.funcName(k.Func), Context: Process, Packets: v.Packets})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read counts: %w", err)
	}
	var perCPU []gtpGtpCpuCounts
	if err := t.cpuWork.Lookup(uint32(0), &perCPU); err != nil {
		return nil, fmt.Errorf("read per-CPU counts: %w", err)
	}
	out = append(out, t.cpuCounts(perCPU)...)
	sortCounts(out)
	return out, nil
}

// processCPU is Count.CPU for a process's counts (they are not per CPU).
const processCPU = 0xffffffff

// cpuCounts lists the non-zero slots of each CPU's counts (possible CPUs in
// order, as the kernel returns a per-CPU value).
func (t *Tracer) cpuCounts(perCPU []gtpGtpCpuCounts) []Count {
	var out []Count
	for cpu := range perCPU {
		for i, c := range perCPU[cpu].C {
			if c.Packets == 0 {
				continue
			}
			fn, ctx := i/len(contextNames), Context(i%len(contextNames))
			out = append(out, Count{CPU: uint32(cpu), Function: t.funcName(uint32(fn)), Context: ctx, Packets: c.Packets})
		}
	}
	return out
}

func sortCounts(out []Count) {
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.TGID != b.TGID {
			return a.TGID < b.TGID
		}
		if a.CPU != b.CPU {
			return a.CPU < b.CPU
		}
		if a.Function != b.Function {
			return a.Function < b.Function
		}
		return a.Context < b.Context
	})
}

// Forget deletes a process's counts (every traced function, process
// context), so a later process with its PID starts from zero; counts of
// other contexts are per CPU and stay.
func (t *Tracer) Forget(tgid uint32) error {
	var errs []error
	for id := range t.funcs {
		k := gtpGtpKey{Tgid: tgid, Func: uint32(id)}
		if err := t.counts.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Drops is the number of events lost because the ring was full (the
// counts still include them).
func (t *Tracer) Drops() (uint64, error) { return percpu.Sum[uint64](t.drops, uint32(0)) }

// Close detaches and releases everything.
func (t *Tracer) Close() error {
	var errs []error
	if t.stopEpochs != nil {
		t.stopEpochs()
		t.stopEpochs = nil
	}
	if t.reader != nil {
		errs = append(errs, t.reader.Close())
	}
	for _, l := range t.links {
		errs = append(errs, l.Close())
	}
	for _, p := range t.progs {
		errs = append(errs, p.Close())
	}
	for _, m := range t.maps {
		errs = append(errs, m.Close())
	}
	t.links, t.progs, t.maps = nil, nil, nil
	return errors.Join(errs...)
}

func (t *Tracer) funcName(id uint32) string {
	if int(id) < len(t.funcs) {
		return t.funcs[id]
	}
	return fmt.Sprintf("func(%d)", id)
}

func cString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}

// Monotonic is the clock BPF timestamps use (bpf_ktime_get_ns), in ns.
func Monotonic() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

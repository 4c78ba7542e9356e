// SPDX-License-Identifier: GPL-2.0-only
//go:build ignore

/*
 * swiftlane user-space mode: the kernel half of a sched_ext scheduler whose
 * policy runs in a Go process (package usersched).
 *
 * Flow. A task that becomes runnable is sent to user space through the ring
 * buffer "queued" (struct usr_task). The Go loop orders the tasks, picks
 * CPUs and sends decisions back through the user ring buffer "dispatched"
 * (struct usr_decision), which CPUs drain in ops.dispatch. A decision puts
 * the task on one CPU's local queue, or in DSQ_USER, ordered by the deadline
 * user space gave it and served by every CPU.
 *
 * Stale decisions. Each request carries a sequence number that the task's
 * context keeps until the decision comes back. If the task was queued again,
 * dequeued (its affinity or class changed) or has gone meanwhile, the numbers
 * differ and the decision is dropped (counted), never applied to the wrong
 * enqueue.
 *
 * What never waits for user space:
 *  - critical tasks (a `critical` strategy): they wake onto an idle CPU, or
 *    wait in DSQ_CRITICAL, served first, preempting non-critical work, within
 *    the same CPU budget as the in-kernel scheduler (effective_class);
 *  - kernel threads: per-CPU ones straight to their CPU, the others in
 *    DSQ_KTHREAD, FIFO, ahead of user decisions. They are what the kernel
 *    itself runs on (RCU's grace-period thread, the kworker that runs
 *    sched_ext's own watchdog): made to wait behind a slow user space, they
 *    get the scheduler ejected (RCU stall, watchdog). A user-space policy
 *    is for user workloads;
 *  - tasks that find the ring to user space full: DSQ_FALLBACK (counted);
 *  - tasks waiting for a user space that has answered nothing for stall_ns
 *    while it has work pending: a CPU takes them back from the map of
 *    outstanding requests (rescue_stalled) and new ones skip user space,
 *    until it answers again (counted). A user-space scheduler cannot rule
 *    out waiting, in the kernel, for a task that waits for it (a forked
 *    child, a kworker), nor long pauses of its runtime: this bounds the
 *    damage to stall_ns, far below the kernel's 30 s watchdog;
 *  - the scheduler's own threads: every thread of the Go process, known by
 *    its thread-group id (which also covers threads the runtime starts
 *    later). The loop thread waits in DSQ_LOOP and runs only while it has
 *    work (loop_has_work: requests it has not read, tasks its policy holds):
 *    ahead of the tasks already dispatched, behind critical tasks, its own
 *    decisions and kernel threads; ahead of everything once that work has
 *    waited a slice (loop_overdue). With no work it parks there when it
 *    yields instead of spinning, so the scheduler runs in bursts and costs
 *    nothing when idle; a BPF timer (the heartbeat) still runs it now and then, to
 *    notice it should stop, and to wake a CPU left idle with tasks on its
 *    local queue (kick_idle_with_local_tasks). The Go runtime's other
 *    threads (garbage collector, sysmon, timers) wait in DSQ_SCHED, served
 *    ahead of user decisions while they stay within a CPU budget (the loop
 *    may be waiting for one of them, e.g. for a P or to finish a
 *    stop-the-world), and every other time beyond it: a busy Go process (a
 *    storm of garbage collections) neither starves the machine nor starves
 *    itself.
 *
 * The strategy maps, process events, exit record and critical budget are
 * the in-kernel scheduler's, from the headers both share
 * (internal/schedext/bpf: schedext.h, critical.h, overdue.h), so the same
 * strategy Applier drives both.
 */
#include "common.h" /* internal/schedext/bpf: kernel types, libbpf, intf.h, compat.h */
#include "usersched.h"

#define CLOCK_MONOTONIC 1
/* Longest runtime-since-sleep reported and accounted, so one burst cannot push a task back forever. */
#define EXEC_RUNTIME_MAX (100 * NSEC_PER_MSEC)
/* rescue_one's min_wait when no rescue is due. */
#define NO_RESCUE (~0ULL)
/* Renumbered between kernels, like ENQ_WAKEUP (common.h). */
#define ENQ_LAST bpf_core_enum_value(enum scx_enq_flags, SCX_ENQ_LAST)
#define ENQ_HEAD bpf_core_enum_value(enum scx_enq_flags, SCX_ENQ_HEAD)

#define DSQ_CRITICAL 1 /* critical tasks, FIFO, served first */
#define DSQ_USER 2     /* decisions for any CPU, by the deadline user space gave */
#define DSQ_FALLBACK 3 /* tasks that found the ring to user space full, FIFO */
#define DSQ_LOOP 4     /* the Go dispatch loop's thread */
#define DSQ_SCHED 5    /* the Go process's other threads, FIFO */
#define DSQ_KTHREAD 6  /* kernel threads not bound to one CPU, FIFO */

/*
 * Every queue a task can wait in, the scheduler's own threads' too: the
 * overdue walk and a CPU going offline go through each, in this order.
 * DSQ_CRITICAL comes last: every dispatch serves it first anyway, and the
 * tasks a walk rescues run in the order it moves them, so those that
 * critical tasks starve go first.
 */
static const u64 usr_queues[] = {DSQ_USER, DSQ_FALLBACK, DSQ_KTHREAD, DSQ_SCHED, DSQ_LOOP, DSQ_CRITICAL};

struct task_struct *bpf_task_from_pid(s32 pid) __ksym;
void bpf_task_release(struct task_struct *p) __ksym;
u32 scx_bpf_dispatch_nr_slots(void) __ksym;

/* Set by the loader before the object is loaded (usersched.Options). */
const volatile u64 slice_ns = 2 * NSEC_PER_MSEC;      /* slice of decisions that leave it 0 */
const volatile u64 heartbeat_ns = 100 * NSEC_PER_MSEC; /* a parked loop runs at least this often */
const volatile u64 stall_ns = 500 * NSEC_PER_MSEC;     /* user space silent this long: rescue */
const volatile u64 overdue_ns = 250 * NSEC_PER_MSEC;   /* a task user space holds this long: rescue it */
/*
 * A task queued with us this long goes next (the in-kernel scheduler's
 * starvation_ns). Shorter than overdue_ns: those are the policy's to hold,
 * these wait only because something else keeps going first. At 250 ms,
 * an unplug beside critical loops took 1-2 s (0.3-0.8 s without them): its
 * synchronize_rcu() waits for each wakeup of the RCU kthread.
 */
const volatile u64 queued_overdue_ns = 100 * NSEC_PER_MSEC;
const volatile u32 nr_cpus = 1;
const volatile u32 sched_tgid; /* the user-space scheduler's process */

#include "critical.h" /* the critical class's CPU budget, and its tunables */
#include "overdue.h"

/* Requests sent to user space and decisions received: work is pending while they differ. */
u64 nr_sent, nr_answered;
/* When the last decision arrived. */
static u64 last_answer_at;
static u64 next_seq;
/* Set by the heartbeat: the loop runs ahead of everything else once. */
static bool heartbeat_due;
/*
 * CPU time the Go process's other threads may still take ahead of user
 * decisions: refills at SCHED_SHARE_PCT of one CPU, banks SCHED_BURST_NS.
 */
#define SCHED_SHARE_PCT 25
#define SCHED_BURST_NS (20 * NSEC_PER_MSEC)
static s64 sched_budget = SCHED_BURST_NS;
static u64 sched_budget_at;
static u32 sched_turns; /* over budget, DSQ_SCHED takes every other turn */
/* The loop's thread while it is on a CPU (0 when off), and when it last left one. */
static u32 loop_on_cpu;
static u64 loop_stopped_at;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct usr_stats);
} stats SEC(".maps");

#define STAT_ADD(field, n)                                                    \
	do {                                                                  \
		u32 __zero = 0;                                               \
		struct usr_stats *__s = bpf_map_lookup_elem(&stats, &__zero); \
		if (__s)                                                      \
			__s->field += (n);                                    \
	} while (0)
#define STAT_INC(field) STAT_ADD(field, 1)

/* Runnable tasks for user space; sized by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 512 * 1024);
} queued SEC(".maps");

/* Decisions from user space; sized by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_USER_RINGBUF);
	__uint(max_entries, 256 * 1024);
} dispatched SEC(".maps");

/* Outstanding requests, pid -> seq, for rescue_stalled. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, u32);
	__type(value, u64);
} outstanding SEC(".maps");

/*
 * Outstanding requests by when they were sent: a count per epoch of
 * 2^REQ_EPOCH_SHIFT ns (16.8 ms), REQ_EPOCHS epochs a round (1.07 s). The
 * walk over `outstanding` for requests user space has held past
 * overdue_ns runs only when an epoch that old still counts one
 * (requests_overdue). It used to run whenever a CPU's overdue walk was due
 * (every 4 ms on a busy CPU, and on the first dispatch after an idle
 * spell), and bpf_for_each_map_elem over a hash map visits all of its
 * 32,768 buckets however few requests are outstanding: 210-240 µs a walk
 * on the build host (BPF test run, native), far more under TCG, where it
 * took much of a CPU and delayed every wakeup of an idle CPU. A request
 * still outstanding after a whole round shares its epoch's count with new
 * ones and looks young until they pass the bound: its rescue is late by at
 * most overdue_ns, once a round.
 */
#define REQ_EPOCH_SHIFT 24
#define REQ_EPOCHS 64
static s64 req_epochs[REQ_EPOCHS];

static s64 *req_epoch(u64 sent_at)
{
	return &req_epochs[(sent_at >> REQ_EPOCH_SHIFT) & (REQ_EPOCHS - 1)];
}

/* Live state user space reads through mmap: idle CPUs, whether we exited. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct usr_shared);
} shared SEC(".maps");

/* What each CPU runs now (cpu_states, schedext.h). */
struct cpu_state {
	u32 class;
	u32 busy;
	struct overdue_state overdue;
};

struct heartbeat_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct heartbeat_timer);
} heartbeat SEC(".maps");

/* Unused: make the compiler emit these types' BTF for the Go bindings. */
struct usr_task _usr_task_btf;
struct usr_decision _usr_decision_btf;

struct task_ctx {
	u64 seq;          /* request to user space awaiting its decision, 0 if none */
	u64 sent_at;      /* when that request was sent */
	u64 enq_at;       /* when it became runnable or was preempted; 0 while it runs */
	u64 started_at;   /* when it last got a CPU */
	u64 exec_runtime; /* CPU time since it last slept */
	u64 vtime;        /* virtual runtime (usr_task.vtime) */
	s64 crit_budget;  /* critical-class CPU time it may still use, ns */
	u64 budget_at;    /* last budget refill */
	u64 strat_gen;    /* strategy_gen + 1 when class and slice were resolved */
	u64 strat_slice;  /* slice from its strategy, 0 for the default */
	u32 class;        /* class from its strategy */
	u32 run_class;    /* class it runs with this time (critical may be demoted) */
	u32 rcu_reader;   /* queued preempted inside an RCU read-side section (rcu_reader()) */
};

#include "schedext.h" /* task and CPU state, strategies, critical class, process events, exit record */
#include "overdue_cpu.h"

static struct usr_shared *lookup_shared(void)
{
	u32 zero = 0;

	return bpf_map_lookup_elem(&shared, &zero);
}

static bool is_sched_thread(const struct task_struct *p)
{
	return p->tgid == sched_tgid;
}

/*
 * The loop's goroutine is not locked to a thread (a locked goroutine that the
 * Go runtime preempts needs two other threads to get going again), so user
 * space publishes which thread runs it, every iteration.
 */
static bool is_loop_thread(const struct task_struct *p)
{
	struct usr_shared *sh = lookup_shared();
	u32 tid = sh ? *(volatile u32 *)&sh->loop_tid : 0;

	return tid && p->pid == tid;
}

static bool is_kthread(const struct task_struct *p)
{
	return p->flags & PF_KTHREAD;
}

/* Requests sent and not answered yet: what a stalled user space holds (user_stalled). */
static bool user_work_pending(void)
{
	return nr_sent != nr_answered;
}

/*
 * Work for the Go loop: requests it has not read, or tasks it read and has
 * not dispatched (its policy holds them, or the ring back was full). Not
 * user_work_pending(): the decisions already in the ring back are the CPUs'
 * to drain in ops.dispatch, and a loop kept running for them (SCX_ENQ_LAST
 * re-inserts it on its own CPU, whose ops.dispatch then never runs) spun
 * on a CPU with nothing to do. In the cluster lab that was one of the
 * node's two CPUs, and every wakeup waited behind the tasks already
 * dispatched for its decision: pods took minutes to start.
 */
static bool loop_has_work(void)
{
	struct usr_shared *sh = lookup_shared();

	return bpf_ringbuf_query(&queued, BPF_RB_AVAIL_DATA) || (sh && *(volatile u32 *)&sh->held);
}

/* User space has had work for stall_ns and answered nothing meanwhile. */
static bool user_stalled(void)
{
	return user_work_pending() && bpf_ktime_get_ns() - last_answer_at > stall_ns;
}

/*
 * The loop's work waits at most one slice: past that, the loop goes ahead
 * of critical tasks, kernel threads and the Go runtime's other threads too.
 */
static bool loop_overdue(void)
{
	return !loop_on_cpu && bpf_ktime_get_ns() - loop_stopped_at > slice_ns && loop_has_work();
}

/* A request seq for tctx's task is about to go to user space. */
static void request_sent(struct task_ctx *tctx, u64 seq, u64 now)
{
	tctx->sent_at = now;
	__sync_fetch_and_add(req_epoch(now), 1);
	tctx->seq = seq;
}

/*
 * Request seq is answered, withdrawn or taken back: true for the one
 * caller that ends it (a decision and a rescue may race for it), which
 * then owns the task; its epoch counts one request less.
 */
static bool request_done(struct task_ctx *tctx, u64 seq)
{
	if (!seq || __sync_val_compare_and_swap(&tctx->seq, seq, 0) != seq)
		return false;
	__sync_fetch_and_sub(req_epoch(tctx->sent_at), 1);
	return true;
}

/* May a request have been outstanding longer than bound? (req_epochs) */
static bool requests_overdue(u64 now, u64 bound)
{
	u64 cur = now >> REQ_EPOCH_SHIFT, last = (now - bound) >> REQ_EPOCH_SHIFT;
	u32 i, n;

	if (cur - last >= REQ_EPOCHS)
		return true; /* a bound beyond the round: walk */
	/* From the epoch holding now - bound (partly younger) back to the round's oldest. */
	n = REQ_EPOCHS - (u32)(cur - last);
	bpf_for(i, 0, n) {
		if (*(volatile s64 *)&req_epochs[(last - i) & (REQ_EPOCHS - 1)] > 0)
			return true;
	}
	return false;
}

/* CPU time to virtual time, as the in-kernel scheduler ages tasks: by weight, then class. */
static u64 scale_inverse(u64 delta, const struct task_struct *p, u32 class)
{
	u64 w8 = class <= SWL_CLASS_HIGH ? 32 : class == SWL_CLASS_BACKGROUND ? 1 : 8;
	u64 w = (u64)p->scx.weight * w8;

	return delta * 100 * 8 / (w ? w : 1);
}

/* An idle CPU for p, claimed: its previous CPU, then a fully idle core, then any. */
static s32 pick_idle_cpu(struct task_struct *p, s32 prev_cpu)
{
	s32 cpu = pick_idle_prev_or_core(p, prev_cpu);

	return cpu >= 0 ? cpu : scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
}

/* Wake an idle CPU p may run on, so it runs ops.dispatch soon. */
static void kick_idle(struct task_struct *p)
{
	s32 cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);

	if (cpu >= 0)
		swl_kick_cpu(cpu, SCX_KICK_IDLE);
}

/* May p be put on cpu's local queue? A migration-disabled task must stay where it is. */
static bool cpu_allowed(struct task_struct *p, s32 cpu)
{
	if (cpu < 0 || cpu >= nr_cpus || !bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
		return false;
	if (bpf_core_field_exists(p->migration_disabled) && p->migration_disabled &&
	    cpu != scx_bpf_task_cpu(p))
		return false;
	return true;
}

/* Make a CPU available to a woken critical task: an idle one, else preempt non-critical work. */
static void kick_for_critical(struct task_struct *p)
{
	s32 prev = scx_bpf_task_cpu(p), idle;

	idle = pick_idle_cpu(p, prev);
	if (idle >= 0)
		swl_kick_cpu(idle, SCX_KICK_IDLE);
	else
		preempt_for_critical(p, prev, 0); /* its previous CPU first */
}

/*
 * Hand p to user space. If the ring is full, user space is behind: dispatch
 * p here rather than lose it, and forget any request still outstanding for
 * it so a late decision counts as stale.
 */
static void send_to_user(struct task_struct *p, struct task_ctx *tctx, u32 class, u64 enq_flags, u64 now)
{
	struct usr_task *t;
	u32 pid = p->pid;
	u64 seq;

	/* A decision for an earlier request, if one is outstanding, is stale from now on. */
	request_done(tctx, tctx->seq);
	if (user_stalled()) {
		STAT_INC(rescued);
		goto direct;
	}
	t = bpf_ringbuf_reserve(&queued, sizeof(*t), 0);
	if (!t)
		goto full;
	seq = __sync_add_and_fetch(&next_seq, 1);
	request_sent(tctx, seq, now);
	if (bpf_map_update_elem(&outstanding, &pid, &seq, BPF_ANY)) {
		request_done(tctx, seq);
		bpf_ringbuf_discard(t, BPF_RB_NO_WAKEUP);
		goto full;
	}
	t->seq = seq;
	t->vtime = tctx->vtime;
	t->exec_runtime = tctx->exec_runtime;
	t->sum_exec_runtime = p->se.sum_exec_runtime;
	t->enqueued_at = now;
	t->enq_flags = enq_flags;
	t->pid = p->pid;
	t->tgid = p->tgid;
	t->cpu = scx_bpf_task_cpu(p);
	t->weight = p->scx.weight;
	t->nr_cpus_allowed = p->nr_cpus_allowed;
	t->class = class;
	bpf_probe_read_kernel_str(t->comm, sizeof(t->comm), p->comm);
	/* No wakeup: the Go loop polls the ring when it runs, and runs because work is pending. */
	bpf_ringbuf_submit(t, BPF_RB_NO_WAKEUP);
	__sync_fetch_and_add(&nr_sent, 1);
	STAT_INC(sent);
	/* An idle CPU will run ops.dispatch, which runs the scheduler's threads. */
	kick_idle(p);
	return;
full:
	STAT_INC(fallback);
direct:
	swl_insert(p, DSQ_FALLBACK, slice_ns, enq_flags);
	kick_idle(p);
}

/*
 * bpf_for_each_map_elem callback: take one outstanding task back from user
 * space, if it has waited there at least *min_wait ns.
 */
static long rescue_one(struct bpf_map *map, u32 *pid, u64 *seq, u64 *min_wait)
{
	struct task_struct *p = bpf_task_from_pid(*pid);
	struct task_ctx *tctx;

	if (!p) {
		bpf_map_delete_elem(map, pid);
		return 0;
	}
	tctx = lookup_task_ctx(p);
	if (tctx && tctx->seq == *seq && bpf_ktime_get_ns() - tctx->sent_at < *min_wait) {
		bpf_task_release(p);
		return 0;
	}
	bpf_map_delete_elem(map, pid);
	if (tctx && request_done(tctx, *seq)) { /* user space's decision, when it comes, is stale */
		swl_insert(p, DSQ_FALLBACK, slice_ns, 0);
		STAT_INC(rescued);
	}
	bpf_task_release(p);
	return scx_bpf_dispatch_nr_slots() ? 0 : 1;
}

/* Refill the budget (approximately: CPUs race on it, which only blurs it) and test it. */
static bool sched_budget_left(void)
{
	u64 now = bpf_ktime_get_ns();
	s64 b = sched_budget + (s64)((now - sched_budget_at) * SCHED_SHARE_PCT / 100);

	sched_budget = b < (s64)SCHED_BURST_NS ? b : (s64)SCHED_BURST_NS;
	sched_budget_at = now;
	return sched_budget > 0;
}

struct drain_ctx {
	s32 cpu;    /* the dispatching CPU */
	bool local; /* a decision put a task on its local queue */
};

static void record_rtt(u64 ns)
{
	u32 zero = 0, b;
	struct usr_stats *s = bpf_map_lookup_elem(&stats, &zero);
	u64 us;

	if (!s)
		return;
	s->rtt_count++;
	s->rtt_sum_ns += ns;
	if (ns > s->rtt_max_ns)
		s->rtt_max_ns = ns;
	/* log2 bucket of the round trip in µs: 0 below 1 µs, else floor(log2)+1. */
	us = ns / 1000;
	b = us ? 64 - __builtin_clzll(us) : 0;
	if (b >= USR_RTT_BUCKETS)
		b = USR_RTT_BUCKETS - 1;
	s->rtt_hist[b]++;
}

/* bpf_user_ringbuf_drain callback: apply one decision. Returns 1 to stop draining. */
static long apply_decision(struct bpf_dynptr *rec, void *data)
{
	struct drain_ctx *dc = data;
	struct usr_decision d;
	struct task_struct *p;
	struct task_ctx *tctx;
	u64 slice;
	s32 cpu;

	if (bpf_dynptr_read(&d, sizeof(d), rec, 0, 0))
		return 0; /* not a decision: only our Go side writes this ring */
	__sync_fetch_and_add(&nr_answered, 1);
	last_answer_at = bpf_ktime_get_ns();

	p = bpf_task_from_pid(d.pid);
	if (!p) {
		STAT_INC(stale);
		return 0;
	}
	tctx = lookup_task_ctx(p);
	if (!tctx || !request_done(tctx, d.seq)) {
		STAT_INC(stale);
		bpf_task_release(p);
		return 0;
	}
	bpf_map_delete_elem(&outstanding, &d.pid);
	tctx->vtime = d.vtime;
	record_rtt(bpf_ktime_get_ns() - tctx->sent_at);
	slice = d.slice_ns ? d.slice_ns : slice_ns;

	cpu = d.cpu;
	if (cpu != USR_CPU_ANY && !cpu_allowed(p, cpu)) {
		STAT_INC(bounced);
		cpu = USR_CPU_ANY;
	}
	if (cpu == USR_CPU_ANY)
		cpu = pick_idle_cpu(p, scx_bpf_task_cpu(p));
	if (cpu >= 0) {
		swl_insert(p, SCX_DSQ_LOCAL_ON | cpu, slice, 0);
		if (cpu == dc->cpu)
			dc->local = true;
		else
			swl_kick_cpu(cpu, SCX_KICK_IDLE);
	} else {
		swl_insert_vtime(p, DSQ_USER, slice, d.deadline, 0);
	}
	STAT_INC(applied);
	bpf_task_release(p);
	/* ops.dispatch may insert only so many tasks; the rest wait for the next call. */
	return scx_bpf_dispatch_nr_slots() ? 0 : 1;
}

s32 BPF_STRUCT_OPS(usr_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct task_ctx *tctx;
	u64 now;
	s32 cpu;

	/* Only critical tasks are placed here; for the rest, the CPU is user space's decision. */
	if (is_sched_thread(p) || !(tctx = lookup_task_ctx(p)))
		return prev_cpu;
	resolve_strategy(p, tctx);
	if (tctx->class != SWL_CLASS_CRITICAL)
		return prev_cpu;
	now = bpf_ktime_get_ns();
	tctx->run_class = effective_class(tctx, now);
	if (tctx->run_class != SWL_CLASS_CRITICAL)
		return prev_cpu;
	cpu = pick_idle_cpu(p, prev_cpu);
	if (cpu < 0)
		return prev_cpu;
	if (!local_insert_ok(cpu, usr_queues, ARRAY_SIZE(usr_queues), now, queued_overdue_ns))
		return cpu; /* ops.enqueue queues it; the wakeup wakes that idle CPU, which dispatches */
	STAT_INC(critical);
	STAT_INC(critical_direct);
	swl_insert(p, SCX_DSQ_LOCAL, tctx->strat_slice ? tctx->strat_slice : slice_ns, 0);
	return cpu;
}

/*
 * p was the last runnable task on its CPU (SCX_ENQ_LAST) and is to run on.
 * The kernel asks this only after it has picked the idle task, while p is
 * still current: an insert into the local queue then reschedules nothing,
 * and the CPU went idle with p on its queue until some other event woke it
 * (a tickless CPU may sleep for seconds; if it is the one being unplugged,
 * the unplug waits). Kick the CPU so it reschedules and finds p.
 */
static void keep_running(struct task_struct *p, u64 enq_flags)
{
	swl_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags);
	swl_kick_cpu(scx_bpf_task_cpu(p), 0);
}

void BPF_STRUCT_OPS(usr_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = lookup_task_ctx(p);
	u64 now = bpf_ktime_get_ns();
	u32 class;

	if (is_loop_thread(p)) {
		/*
		 * The last runnable task on its CPU (it yielded with nothing else
		 * to run): with work it carries on; without, it parks in DSQ_LOOP
		 * and the CPU idles (draining the decisions just sent on the way),
		 * where the kernel would have kept it spinning (hence
		 * SCX_OPS_ENQ_LAST).
		 */
		if ((enq_flags & ENQ_LAST) && loop_has_work()) {
			keep_running(p, enq_flags);
			return;
		}
		swl_insert(p, DSQ_LOOP, slice_ns, enq_flags);
		if (loop_has_work())
			kick_idle(p);
		return;
	}
	if (is_sched_thread(p) && !(enq_flags & ENQ_LAST)) {
		swl_insert(p, DSQ_SCHED, slice_ns, enq_flags);
		kick_idle(p);
		return;
	}
	/* Any other task that is the last one on its CPU keeps running. */
	if (enq_flags & ENQ_LAST) {
		keep_running(p, enq_flags);
		return;
	}
	if (!tctx) {
		swl_insert(p, DSQ_FALLBACK, slice_ns, enq_flags);
		return;
	}
	/*
	 * A task preempted inside an RCU read-side section (rcu_reader(),
	 * schedext.h) holds up every grace period: it goes to the head of the
	 * critical queue here, not through user space, and no critical wakeup
	 * preempts it (usr_running) until it stops.
	 */
	tctx->rcu_reader = rcu_reader(p);
	if (tctx->rcu_reader) {
		STAT_INC(rcu_reader);
		swl_insert(p, DSQ_CRITICAL, slice_ns, enq_flags | ENQ_HEAD);
		kick_idle(p);
		return;
	}
	if (is_kthread(p)) {
		STAT_INC(kthread);
		if (p->nr_cpus_allowed == 1) {
			swl_insert(p, SCX_DSQ_LOCAL, slice_ns, enq_flags);
		} else {
			swl_insert(p, DSQ_KTHREAD, slice_ns, enq_flags);
			kick_idle(p);
		}
		return;
	}
	resolve_strategy(p, tctx);
	class = effective_class(tctx, now);
	tctx->run_class = class;
	if (class == SWL_CLASS_CRITICAL) {
		STAT_INC(critical);
		swl_insert(p, DSQ_CRITICAL, tctx->strat_slice ? tctx->strat_slice : slice_ns, enq_flags);
		/* Only a wakeup preempts; a re-queued critical task waits at the head of its queue. */
		if (enq_flags & ENQ_WAKEUP)
			kick_for_critical(p);
		else
			kick_idle(p);
		return;
	}
	send_to_user(p, tctx, class, enq_flags, now);
}

void BPF_STRUCT_OPS(usr_dequeue, struct task_struct *p, u64 deq_flags)
{
	struct task_ctx *tctx = lookup_task_ctx(p);
	u32 pid = p->pid;

	/* It left our custody before user space decided: that decision is now stale. */
	if (tctx && request_done(tctx, tctx->seq))
		bpf_map_delete_elem(&outstanding, &pid);
}

void BPF_STRUCT_OPS(usr_dispatch, s32 cpu, struct task_struct *prev)
{
	u64 min_wait = NO_RESCUE;
	struct drain_ctx dc = { .cpu = cpu };
	struct cpu_state *cs;
	bool critical, walk;
	u64 now;

	if ((heartbeat_due || loop_overdue()) && swl_move_to_local(DSQ_LOOP)) {
		heartbeat_due = false;
		STAT_INC(sched_thread);
		return;
	}
	/*
	 * Bounded wait (overdue.h), whatever the policy: requests user space
	 * has held longer than overdue_ns, and tasks queued with us longer
	 * than queued_overdue_ns, go first.
	 */
	cs = bpf_map_lookup_elem(&cpu_states, (u32 *)&cpu);
	now = bpf_ktime_get_ns();
	walk = cs && overdue_walk_due(&cs->overdue, now);
	if (user_stalled())
		min_wait = 0; /* all of them */
	else if (walk && requests_overdue(now, overdue_ns))
		min_wait = overdue_ns;
	if (min_wait != NO_RESCUE) {
		STAT_INC(request_walks);
		bpf_for_each_map_elem(&outstanding, rescue_one, &min_wait, 0);
	}
	/*
	 * The queues' walk is due on its own clock, also while user space is
	 * stalled: that is when they starve. It was skipped then, and under
	 * the torture, with critical tasks that yield in loops, one CPU being
	 * unplugged (inactive, so the kernel runs nothing there, but still in
	 * the critical pool until ops.cpu_offline) and the Go process starved
	 * by them, the tasks taken back from user space, the kernel threads
	 * and the Go threads all sat behind DSQ_CRITICAL for 20 s: the unplug's
	 * synchronize_rcu() waited for the starved RCU kthread, and the kernel
	 * ejected the scheduler for an RCU stall.
	 */
	if (walk && cs) {
		rescue_overdue_queues(usr_queues, ARRAY_SIZE(usr_queues), cpu, now, queued_overdue_ns, &cs->overdue);
		if (cs->overdue.moved)
			STAT_ADD(rescued, cs->overdue.moved);
		if (cs->overdue.here)
			return;
	}
	critical = swl_move_to_local(DSQ_CRITICAL);
	/* Decisions for this CPU queue behind a critical task taken above. */
	bpf_user_ringbuf_drain(&dispatched, apply_decision, &dc, BPF_RB_NO_WAKEUP);
	if (critical || dc.local)
		return;
	/* The Go runtime's threads: first within their budget, else every other time. */
	if (scx_bpf_dsq_nr_queued(DSQ_SCHED) && (sched_budget_left() || (sched_turns++ & 1)) &&
	    swl_move_to_local(DSQ_SCHED)) {
		STAT_INC(sched_thread);
		return;
	}
	if (swl_move_to_local(DSQ_KTHREAD))
		return;
	/*
	 * The loop before the tasks it already dispatched: every task that
	 * wakes waits for it, and it waited behind them (a slice each, up to
	 * loop_overdue) — each wakeup cost a slice under load.
	 */
	if (loop_has_work() && swl_move_to_local(DSQ_LOOP)) {
		STAT_INC(sched_thread);
		return;
	}
	if (swl_move_to_local(DSQ_FALLBACK) || swl_move_to_local(DSQ_USER))
		return;
	if (swl_move_to_local(DSQ_SCHED)) {
		STAT_INC(sched_thread);
		return;
	}
	/*
	 * Nothing else wants this CPU: prev runs on. Not the loop, which gets
	 * here by yielding when it has nothing to do.
	 */
	if (prev && (prev->scx.flags & SCX_TASK_QUEUED) && !is_loop_thread(prev))
		prev->scx.slice = slice_ns;
}

void BPF_STRUCT_OPS(usr_runnable, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = lookup_task_ctx(p);

	if (!tctx)
		return;
	tctx->exec_runtime = 0; /* it slept: its burst is over */
	tctx->enq_at = bpf_ktime_get_ns();
}

void BPF_STRUCT_OPS(usr_running, struct task_struct *p)
{
	struct task_ctx *tctx = lookup_task_ctx(p);
	u32 cpu = scx_bpf_task_cpu(p), zero = 0;
	struct cpu_state *cs;

	if (is_loop_thread(p))
		loop_on_cpu = p->pid;
	if (!tctx)
		return;
	tctx->started_at = bpf_ktime_get_ns();
	if (tctx->enq_at) {
		struct usr_stats *s = bpf_map_lookup_elem(&stats, &zero);
		u64 wait = tctx->started_at - tctx->enq_at;

		if (s && wait > s->wait_max_ns)
			s->wait_max_ns = wait;
		tctx->enq_at = 0;
	}
	cs = bpf_map_lookup_elem(&cpu_states, &cpu);
	if (cs) {
		/* A preempted RCU reader is not preempted again for a critical task. */
		cs->class = tctx->rcu_reader ? SWL_CLASS_CRITICAL : tctx->run_class;
		cs->busy = 1;
	}
}

void BPF_STRUCT_OPS(usr_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx = lookup_task_ctx(p);
	u32 cpu = scx_bpf_task_cpu(p);
	bool loop = p->pid == loop_on_cpu;
	struct cpu_state *cs;
	u64 delta;

	if (loop) {
		loop_on_cpu = 0;
		loop_stopped_at = bpf_ktime_get_ns();
	}
	if (!tctx)
		return;
	delta = bpf_ktime_get_ns() - tctx->started_at;
	tctx->rcu_reader = 0; /* its next queueing says again */
	if (runnable)
		tctx->enq_at = tctx->started_at + delta; /* waits again from now */
	if (is_sched_thread(p) && !loop)
		__sync_fetch_and_sub(&sched_budget, (s64)delta);
	tctx->exec_runtime += delta;
	if (tctx->exec_runtime > EXEC_RUNTIME_MAX)
		tctx->exec_runtime = EXEC_RUNTIME_MAX;
	tctx->vtime += scale_inverse(delta, p, tctx->run_class);
	if (tctx->run_class == SWL_CLASS_CRITICAL)
		crit_charge(&tctx->crit_budget, delta);
	cs = bpf_map_lookup_elem(&cpu_states, &cpu);
	if (cs)
		cs->busy = 0;
}

/* Mirror the kernel's idle tracking (kept: SCX_OPS_KEEP_BUILTIN_IDLE) for user space. */
void BPF_STRUCT_OPS(usr_update_idle, s32 cpu, bool idle)
{
	struct usr_shared *sh = lookup_shared();
	u32 w = (u32)cpu / 64;
	u64 bit = 1ULL << ((u32)cpu % 64);

	if (!sh || w >= USR_MAX_CPUS / 64)
		return;
	if (idle)
		__sync_fetch_and_or(&sh->idle[w], bit);
	else
		__sync_fetch_and_and(&sh->idle[w], ~bit);
	/*
	 * No kick from here: the kernel calls this on a CPU going offline too,
	 * as it idles for the last time, where a kick's irq_work would never
	 * run (keep_running() kicks instead).
	 */
}

/*
 * Sleepable, like the in-kernel scheduler's: the task storage is then
 * allocated with GFP_KERNEL, so a fork storm just before attach cannot make
 * the kernel refuse us with -ENOMEM.
 */
s32 BPF_STRUCT_OPS_SLEEPABLE(usr_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	return create_task_ctx(p) ? 0 : -ENOMEM;
}

/* Implemented so the kernel keeps us across CPU hotplug instead of restarting us. */
void BPF_STRUCT_OPS(usr_cpu_online, s32 cpu)
{
	crit_cpu_member(cpu, true);
}

void BPF_STRUCT_OPS(usr_cpu_offline, s32 cpu)
{
	cpu_going_offline(cpu, usr_queues, ARRAY_SIZE(usr_queues));
}

/*
 * On 6.18 a CPU can idle with a task on its local queue and nothing to wake
 * it. Once sched_ext has taken a CPU offline (an unplug, from
 * sched_cpu_deactivate on) the kernel queues tasks there without asking
 * us, and with SCX_OPS_ENQ_LAST the last runnable one, out of slice, goes
 * back on that local queue while the CPU switches to idle, when a
 * reschedule would only mark the task leaving (our reading of 6.18's
 * put_prev_task_scx(); 7.3 marks the idle task instead). The unplug then
 * waits for that task: 2.2 s in one torture run in 40. So every heartbeat
 * kicks such CPUs. Not running one of ours (!busy) is not idle: the CPU
 * may run a task of another class (stress-ng's schedpolicy stressor makes
 * real-time ones), and SCX_KICK_IDLE does nothing to a CPU that is not
 * idle, so idle_kicks counts kicks, not CPUs woken.
 */
static void kick_idle_with_local_tasks(void)
{
	struct cpu_state *cs;
	u32 cpu;

	bpf_for(cpu, 0, nr_cpus) {
		if (cpu >= MAX_CPU_SCAN)
			break;
		cs = bpf_map_lookup_elem(&cpu_states, &cpu);
		if (cs && !cs->busy && scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL_ON | cpu)) {
			swl_kick_cpu(cpu, SCX_KICK_IDLE);
			STAT_INC(idle_kicks);
		}
	}
}

/*
 * Heartbeat: a loop parked for want of work gets one turn ahead of
 * everything else (to see whether it should stop), and this CPU reschedules
 * now to start with it. And no CPU idles past it with tasks to run.
 */
static int heartbeat_fn(void *map, int *key, struct bpf_timer *timer)
{
	if (scx_bpf_dsq_nr_queued(DSQ_LOOP) > 0) {
		heartbeat_due = true;
		STAT_INC(heartbeats);
		swl_kick_cpu(bpf_get_smp_processor_id(), SCX_KICK_PREEMPT);
	}
	kick_idle_with_local_tasks();
	bpf_timer_start(timer, heartbeat_ns, 0);
	return 0;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(usr_init)
{
	struct heartbeat_timer *hb;
	u32 zero = 0;
	s32 err;

	last_answer_at = bpf_ktime_get_ns();
	crit_init(last_answer_at);
	err = scx_bpf_create_dsq(DSQ_CRITICAL, -1) ?: scx_bpf_create_dsq(DSQ_USER, -1) ?:
	      scx_bpf_create_dsq(DSQ_FALLBACK, -1) ?: scx_bpf_create_dsq(DSQ_LOOP, -1) ?:
	      scx_bpf_create_dsq(DSQ_SCHED, -1) ?: scx_bpf_create_dsq(DSQ_KTHREAD, -1);
	if (err)
		return err;
	hb = bpf_map_lookup_elem(&heartbeat, &zero);
	if (!hb)
		return -ENOMEM;
	bpf_timer_init(&hb->timer, &heartbeat, CLOCK_MONOTONIC);
	bpf_timer_set_callback(&hb->timer, heartbeat_fn);
	return bpf_timer_start(&hb->timer, heartbeat_ns, 0);
}

void BPF_STRUCT_OPS(usr_exit, struct scx_exit_info *ei)
{
	struct usr_shared *sh = lookup_shared();

	record_exit(ei);
	if (sh)
		sh->exited = 1;
	emit_event(SWL_EV_SCHED_EXIT, 0, 0, 0);
}

SEC(".struct_ops.link")
struct sched_ext_ops usersched_ops = {
	.select_cpu = (void *)usr_select_cpu,
	.enqueue = (void *)usr_enqueue,
	.dequeue = (void *)usr_dequeue,
	.dispatch = (void *)usr_dispatch,
	.runnable = (void *)usr_runnable,
	.running = (void *)usr_running,
	.stopping = (void *)usr_stopping,
	.update_idle = (void *)usr_update_idle,
	.init_task = (void *)usr_init_task,
	.cpu_online = (void *)usr_cpu_online,
	.cpu_offline = (void *)usr_cpu_offline,
	.init = (void *)usr_init,
	.exit = (void *)usr_exit,
	.flags = SCX_OPS_KEEP_BUILTIN_IDLE | SCX_OPS_ENQ_LAST,
	.name = "swiftlane_user",
};

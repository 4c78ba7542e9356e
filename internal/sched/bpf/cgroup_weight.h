/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Cgroup weights, for the kernel-mode scheduler (swiftlane.bpf.c): the weight
 * a task's vruntime is scaled by follows cpu.weight, which Kubernetes sets
 * from pod and container CPU requests.
 *
 * The kernel's fair class shares CPU time down the cpu cgroup hierarchy: at
 * every level, a cgroup with runnable work gets the part of its parent's
 * share that its cpu.weight is of everything competing there (the parent's
 * other active child cgroups and the parent's own runnable tasks, by nice
 * weight); the root shares the machine the same way. Flattened, that gives
 * every runnable task a fraction F of the machine, and a pod with four
 * threads splits its request four ways instead of getting it four times.
 *
 * There is one global vtime, so each task's vruntime is scaled by
 * vweight = F x nr_runnable x 100: its entitlement relative to the average
 * runnable task. Nice-0 tasks on a host without cgroup weights keep the 100
 * they always had, and the virtual clock keeps its pace however small the
 * cgroups' weights are, so the bounds on sleep credit and on debt in
 * task_deadline() mean the same in a pod as outside one.
 *
 * Bookkeeping. cgroup_init and cgroup_set_weight keep each cgroup's
 * cpu.weight in cgroup storage. runnable and quiescent add and remove the
 * task's nice weight in its cgroup (the root's in root_weight); a cgroup's
 * first runnable task adds its cpu.weight to its parent, which goes on up as
 * long as ancestors become active, and its last one undoes that. A task moved
 * to another cgroup while runnable is dequeued around the move, so
 * quiescent/runnable carry its weight along.
 *
 * Limits. Shares follow runnable state, not use: a cgroup whose threads
 * wake briefly and often counts as active while they run. A task whose
 * share is so small that one run charges it more than DEADLINE_AHEAD_MAX -
 * BURST_AHEAD_MAX (with 4 ms ticks, below about 1/10 of the average task's)
 * is served at the debt horizon of task_deadline(), about once per that much
 * virtual time, which is more than its share: the price of a bounded wait.
 * Critical tasks are weighted as if they were in the root cgroup: their
 * class decides, not their pod. cpu.max (bandwidth) and cpu.idle are not
 * applied.
 *
 * The includer has included schedext.h, and its task_ctx has the members
 * cg_id, cg_weight and cg_level. It calls cgroup_runnable() and
 * cgroup_quiescent() from ops.runnable and ops.quiescent, task_vweight()
 * when a task starts running, and cgroup_weight_init() and
 * cgroup_weight_set() from ops.cgroup_init and ops.cgroup_set_weight.
 */
#ifndef SWIFTLANE_CGROUP_WEIGHT_H
#define SWIFTLANE_CGROUP_WEIGHT_H

#define FRAC_SHIFT 24              /* F in fixed point */
#define NR_RUNNABLE_MAX (1 << 20)  /* keeps F x nr_runnable x VWEIGHT_DFL in 64 bits */
#define VWEIGHT_DFL (100ULL << 10) /* vweight of a nice-0 task among its like, in 1/1024ths */

/* Per-cgroup state, for every non-root cgroup with the cpu controller. */
struct cgrp_ctx {
	u64 task_weight;  /* nice weights of its runnable tasks (atomic) */
	u64 child_weight; /* cpu.weight of its active children (under cgrp_lock) */
	u32 weight;       /* its cpu.weight (under cgrp_lock) */
	/*
	 * Active children, +1 while it has runnable tasks (under cgrp_lock).
	 * Activations and deactivations race up the tree and may arrive out of
	 * order; counting through negative values makes such a pair cancel out.
	 */
	s32 nr_active;
};

struct {
	__uint(type, BPF_MAP_TYPE_CGRP_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct cgrp_ctx);
} cgrp_ctxs SEC(".maps");

/* Serialises activation changes against cpu.weight changes. */
struct cgrp_lock {
	struct bpf_spin_lock lock;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct cgrp_lock);
} cgrp_locks SEC(".maps");

static u64 nr_runnable; /* runnable tasks (atomic) */
/* Nice weights of the root cgroup's runnable tasks + cpu.weight of active top-level cgroups (atomic). */
static u64 root_weight;

static u64 max64(u64 a, u64 b)
{
	return a > b ? a : b;
}

/* State of cgrp's ancestor at level (1 .. cgrp->level, the latter being cgrp). */
static struct cgrp_ctx *lookup_ancestor_ctx(struct cgroup *cgrp, int level)
{
	struct cgroup *anc = bpf_cgroup_ancestor(cgrp, level);
	struct cgrp_ctx *cgc;

	if (!anc)
		return NULL;
	cgc = bpf_cgrp_storage_get(&cgrp_ctxs, anc, 0, 0);
	bpf_cgroup_release(anc);
	return cgc;
}

/* cgrp got its first runnable task (activate) or lost its last: update the active weights above it. */
static void cgroup_propagate(struct cgroup *cgrp, struct cgrp_ctx *cgc, bool activate)
{
	struct cgrp_ctx *pcgc;
	struct cgrp_lock *lk;
	int level = cgrp->level, i, l;
	bool changed;
	u32 zero = 0, w;

	lk = bpf_map_lookup_elem(&cgrp_locks, &zero);
	if (!lk)
		return;

	bpf_for(i, 0, MAX_CGROUP_DEPTH) {
		l = level - i; /* cgc's level */
		if (l < 1)
			break;
		pcgc = NULL;
		if (l > 1) {
			pcgc = lookup_ancestor_ctx(cgrp, l - 1);
			if (!pcgc)
				break;
		}

		bpf_spin_lock(&lk->lock);
		if (activate)
			changed = cgc->nr_active++ == 0;
		else
			changed = --cgc->nr_active == 0;
		w = cgc->weight;
		if (changed && pcgc)
			pcgc->child_weight += activate ? (u64)w : -(u64)w;
		bpf_spin_unlock(&lk->lock);

		if (!changed)
			break;
		if (!pcgc) {
			/* A top-level cgroup competes with the root's own tasks. */
			__sync_fetch_and_add(&root_weight, activate ? (u64)w : -(u64)w);
			break;
		}
		cgc = pcgc; /* the parent's activity may change in turn */
	}
}

/* p became runnable: add its weight where it competes. */
static void cgroup_runnable(struct task_struct *p, struct task_ctx *tctx)
{
	u32 w = p->scx.weight ? p->scx.weight : 1;
	struct cgroup *cgrp;
	struct cgrp_ctx *cgc = NULL;

	if (tctx->cg_weight)
		return; /* already counted */
	__sync_fetch_and_add(&nr_runnable, 1);
	tctx->cg_weight = w;
	tctx->cg_level = 0;

	if (bpf_ksym_exists(scx_bpf_task_cgroup)) {
		cgrp = scx_bpf_task_cgroup(p);
		if (cgrp->level)
			cgc = bpf_cgrp_storage_get(&cgrp_ctxs, cgrp, 0, 0);
		if (cgc) {
			tctx->cg_level = cgrp->level;
			tctx->cg_id = cgrp->kn->id;
			if (!__sync_fetch_and_add(&cgc->task_weight, w))
				cgroup_propagate(cgrp, cgc, true);
		}
		bpf_cgroup_release(cgrp);
	}
	/* In the root cgroup, or in one we have no state for. */
	if (!cgc)
		__sync_fetch_and_add(&root_weight, w);
}

/* p stopped being runnable: take its weight back from where runnable put it. */
static void cgroup_quiescent(struct task_struct *p, struct task_ctx *tctx)
{
	u64 w = tctx->cg_weight;
	struct cgroup *cgrp;
	struct cgrp_ctx *cgc;

	if (!w)
		return;
	tctx->cg_weight = 0;
	__sync_fetch_and_sub(&nr_runnable, 1);
	if (!tctx->cg_level || !bpf_ksym_exists(scx_bpf_task_cgroup)) {
		__sync_fetch_and_sub(&root_weight, w);
		return;
	}

	/*
	 * The kernel changes a task's cpu cgroup only with the task dequeued
	 * (quiescent, then runnable in the new cgroup), so this is the cgroup
	 * runnable used. Were it not, leave it: taking the weight from a cgroup
	 * that never had it would be worse, and looking the old one up by id
	 * (bpf_cgroup_from_id) takes kernfs locks, best kept out from under the
	 * run-queue lock held here.
	 */
	cgrp = scx_bpf_task_cgroup(p);
	if (cgrp->kn->id == tctx->cg_id) {
		cgc = bpf_cgrp_storage_get(&cgrp_ctxs, cgrp, 0, 0);
		if (cgc && __sync_fetch_and_sub(&cgc->task_weight, w) == w)
			cgroup_propagate(cgrp, cgc, false);
	}
	bpf_cgroup_release(cgrp);
}

/*
 * The weight p's vruntime is scaled by (see "Cgroup weights"), from the
 * weights competing now: F x nr_runnable x VWEIGHT_DFL / 100.
 */
static u64 task_vweight(struct task_struct *p, struct task_ctx *tctx, u32 class)
{
	u64 w = p->scx.weight ? p->scx.weight : 1;
	u64 n = nr_runnable, denom = root_weight, frac = 1ULL << FRAC_SHIFT, vw;
	struct cgroup *cgrp;
	struct cgrp_ctx *cgc;
	int level, l;

	n = n < 1 ? 1 : n > NR_RUNNABLE_MAX ? NR_RUNNABLE_MAX : n;

	/* Critical tasks are weighted as if in the root cgroup. */
	if (tctx->cg_level && class != SWL_CLASS_CRITICAL && bpf_ksym_exists(scx_bpf_task_cgroup)) {
		cgrp = scx_bpf_task_cgroup(p);
		level = cgrp->level;
		/* Down from the top-level ancestor: its share of its parent's share. */
		bpf_for(l, 1, MAX_CGROUP_DEPTH + 1) {
			if (l > level)
				break;
			cgc = lookup_ancestor_ctx(cgrp, l);
			if (!cgc)
				break;
			frac = frac * max64(cgc->weight, 1) / max64(denom, max64(cgc->weight, 1));
			denom = cgc->task_weight + cgc->child_weight;
		}
		bpf_cgroup_release(cgrp);
	}
	/* The task's own part among the runnable tasks of its cgroup. */
	frac = frac * w / max64(denom, w);

	vw = (frac * n * VWEIGHT_DFL) >> FRAC_SHIFT;
	return vw ? vw : 1;
}

/* From ops.cgroup_init: remember the new cgroup's cpu.weight. */
static void cgroup_weight_init(struct cgroup *cgrp, struct scx_cgroup_init_args *args)
{
	struct cgrp_ctx *cgc;

	if (!cgrp->level)
		return; /* the root has no cpu.weight: root_weight stands for it */
	/*
	 * Without state (out of memory) the cgroup's tasks count as the root's;
	 * failing here would refuse the cgroup or stop the scheduler.
	 */
	cgc = bpf_cgrp_storage_get(&cgrp_ctxs, cgrp, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (cgc)
		cgc->weight = args->weight;
}

/* From ops.cgroup_set_weight: while cgrp is active, its parent sees the change too. */
static void cgroup_weight_set(struct cgroup *cgrp, u32 weight)
{
	struct cgrp_ctx *cgc, *pcgc = NULL;
	struct cgrp_lock *lk;
	u32 zero = 0, old;
	bool active;

	cgc = bpf_cgrp_storage_get(&cgrp_ctxs, cgrp, 0, 0);
	lk = bpf_map_lookup_elem(&cgrp_locks, &zero);
	if (!cgc || !lk)
		return;
	if (cgrp->level > 1) {
		pcgc = lookup_ancestor_ctx(cgrp, cgrp->level - 1);
		if (!pcgc)
			return;
	}

	bpf_spin_lock(&lk->lock);
	old = cgc->weight;
	cgc->weight = weight;
	active = cgc->nr_active > 0;
	if (active && pcgc)
		pcgc->child_weight += (u64)weight - old;
	bpf_spin_unlock(&lk->lock);

	if (active && !pcgc)
		__sync_fetch_and_add(&root_weight, (u64)weight - old);
}

#endif /* SWIFTLANE_CGROUP_WEIGHT_H */

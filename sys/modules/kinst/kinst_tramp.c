/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_tramp.c: the trampoline slots of kinstkit's kinst provider, the
 * same for every ISA, behind kinst.h's kinst_tramp_prepare(), _take(),
 * _release() and _fini().  What a slot holds, where its page comes from and
 * how it is made visible to instruction fetch is the ISA part's
 * (kinst_isa_tpage_alloc(), kinst_isa_tramp_fill(), kinst_isa_tramp_sync()).
 *
 * Slot lifetime.  dtps_enable runs under dtrace_lock and has no way to fail,
 * so it must not sleep or allocate: making a probe (kinst_sx held, may
 * sleep) reserves a slot, mapping a new page when the free slots run out,
 * and enabling takes a reserved slot and fills it (kinst_tramp_take()).
 * Listing probes (dtrace -l) thus fills nothing, and once the listing's
 * probes are destroyed their reservations serve the next ones.  A filled
 * slot is never written again: it belongs to its patch point, and a probe
 * made there again gets it back only if the slot holds, to the byte, what
 * this probe's fill would write there (kinst_tslot_same()); otherwise (a
 * .ko reloaded at that address with other relocated values, another build
 * of this module) the old slot is retired, untouched, for a thread that may
 * still be inside, and a new one reserved.  So a thread inside a trampoline
 * never finds it changed.  Slots are filled in page order, so the free ones
 * are the tail of the newest pages.
 *
 * Unload: the pool (the pages, the slots, the address chains) either goes
 * with the module, after the ISA part's kinst_tramp_quiesce() has shown
 * that no thread is inside a trampoline (arm64, riscv), or, where no such
 * proof exists (KINST_TRAMP_KEEP: amd64, see amd64/kinst_isa.c), outlives
 * it and serves the next load of this module, which finds it through a
 * read-only sysctl the kernel keeps (kinst_tpool_attach()).  Then a load
 * cycle that probes what the last one did maps no page: the pages hold one
 * slot per (patch point, contents) pair enabled since boot, plus the
 * reservations of probes that exist at once, and kldload/kldunload leaks
 * no page per cycle.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/linker.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/mutex.h>
#include <sys/proc.h>
#include <sys/sx.h>
#include <sys/sysctl.h>

#include <sys/dtrace.h>

#include <machine/atomic.h>

#include "kinst_core.h"
#include "kinst.h"

#define	KINST_TSLOTS		(PAGE_SIZE / KINST_TRAMP_SIZE)
#define	KINST_TCHAINS		0x1000
#define	KINST_TCHAIN(pc)	(((pc) / 2) & (KINST_TCHAINS - 1))

/*
 * The pool's version, in the name of the sysctl that keeps it: a build that
 * lays the pool out differently, or fills slots by other rules, bumps it so
 * that it never reads another build's pool.  The sizes are in the name too.
 */
#define	KINST_TPOOL_VERSION	1

/* One trampoline of a page. */
struct kinst_tslot {
	struct kinst_tslot	*ts_next;	/* address chain, once filled */
	uint8_t			*ts_tramp;	/* where it runs */
	uint8_t			*ts_write;	/* it, writable */
	uintptr_t		ts_patchpoint;	/* whose it is, once filled */
	volatile uintptr_t	ts_resume;	/* 0 until filled */
};

/* A page of trampolines and its slots' bookkeeping. */
struct kinst_tpage {
	struct kinst_tpage	*tp_next;	/* allocation order */
	uint8_t			*tp_page;	/* where it runs */
	u_int			tp_used;	/* slots [0, tp_used) filled */
	struct kinst_tslot	tp_slot[KINST_TSLOTS];
};

/*
 * Every page by address, for kinst_tramp_resume_at()'s binary search
 * without a lock: a new vector is published with release order when a page
 * is added, and the old one freed after a dtrace_sync().
 */
struct kinst_tpent {
	uintptr_t		te_page;	/* tp_page */
	struct kinst_tpage	*te_tp;
};

struct kinst_tpagev {
	u_int			tv_n;
	struct kinst_tpent	tv_e[];		/* by te_page */
};

/*
 * The pool.  It and everything it points to is M_DEVBUF, the kernel's
 * malloc type, not this module's M_KINST, which goes at unload; with
 * KINST_TRAMP_KEEP it outlives the module.
 */
struct kinst_tpool {
	u_long			tl_self;	/* its address: the sysctl */
	char			tl_fmt[4];	/* the sysctl's format */
	struct kinst_tpage	*tl_pages;	/* the oldest page */
	struct kinst_tpage	*tl_fill;	/* the first with free slots */
	struct kinst_tpagev *volatile tl_pagev;
	u_int			tl_nfree;	/* slots not yet filled */
	struct kinst_tslot	*tl_chain[KINST_TCHAINS]; /* filled, by pc */
};

/*
 * kinst_tramp_mtx guards the pool's slots and counts and
 * kinst_tslot_reserved; it is taken inside kinst_hash_mtx (enable) or
 * alone, and nothing sleeps under it.  Pages are added, and the pool is
 * attached, under kinst_sx.  Invariant, whenever kinst_sx is not held by a
 * creation in progress: tl_nfree >= kinst_tslot_reserved, the number of
 * probes holding a reservation.  Only one kinst module is loaded at a time
 * (its name, its provider and /dev/dtrace/kinst are unique), so only one
 * uses the pool.
 */
static struct mtx	kinst_tramp_mtx;
MTX_SYSINIT(kinst_tramp_mtx, &kinst_tramp_mtx, "kinst trampolines", MTX_DEF);

static struct kinst_tpool *kinst_tpool;
static u_int		kinst_tslot_reserved;

#ifdef KINST_TRAMP_KEEP
/* The pool's sysctl, under debug: its address, read-only. */
static void
kinst_tpool_name(char *buf, size_t len)
{

	snprintf(buf, len, "kinst_tramp_pool_v%d_%zu_%zu",
	    KINST_TPOOL_VERSION, sizeof(struct kinst_tpool),
	    sizeof(struct kinst_tpage));
}
#endif

/* 'len' bytes at 'p': a breakpoint nobody answers in every patch unit. */
static void
kinst_tramp_blank(uint8_t *p, size_t len)
{
	kinst_patchval_t pv;
	size_t i;

	pv = KINST_PATCHVAL;
	for (i = 0; i + sizeof(pv) <= len; i += sizeof(pv))
		memcpy(p + i, &pv, sizeof(pv));
}

/*
 * kinst_sx held; sleeps.  The pool: the one a previous load of this module
 * left (KINST_TRAMP_KEEP), or a new one.  A new kept pool is published as
 * debug.kinst_tramp_pool_*, a read-only unsigned long that the kernel
 * keeps after unload: sysctl_add_oid() with no context copies the name and
 * the description, and the handler (sysctl_handle_long()), the value and
 * the format it points at are the kernel's, not this module's.
 */
static void
kinst_tpool_attach(void)
{
	struct kinst_tpool *tl;
#ifdef KINST_TRAMP_KEEP
	char name[64], oid[80];
	u_long addr;
	size_t len;

	kinst_tpool_name(name, sizeof(name));
	snprintf(oid, sizeof(oid), "debug.%s", name);
	len = sizeof(addr);
	if (kernel_sysctlbyname(curthread, oid, &addr, &len, NULL, 0, NULL,
	    0) == 0 && len == sizeof(addr) && addr != 0) {
		atomic_store_rel_ptr((volatile uintptr_t *)&kinst_tpool,
		    addr);
		return;
	}
#endif
	tl = malloc(sizeof(*tl), M_DEVBUF, M_WAITOK | M_ZERO);
#ifdef KINST_TRAMP_KEEP
	tl->tl_self = (u_long)tl;
	strlcpy(tl->tl_fmt, "LU", sizeof(tl->tl_fmt));
	if (sysctl_add_oid(NULL, SYSCTL_STATIC_CHILDREN(_debug), OID_AUTO,
	    name, CTLTYPE_ULONG | CTLFLAG_RD | CTLFLAG_SKIP | CTLFLAG_MPSAFE,
	    &tl->tl_self, 0, sysctl_handle_long, tl->tl_fmt,
	    "kinst trampoline pages, kept for the next load", NULL) == NULL)
		printf("kinst: cannot publish debug.%s: the trampoline pages "
		    "of this load will not be reused\n", name);
#endif
	atomic_store_rel_ptr((volatile uintptr_t *)&kinst_tpool,
	    (uintptr_t)tl);
}

static void
kinst_tpent_set(struct kinst_tpent *te, struct kinst_tpage *tp)
{

	te->te_page = (uintptr_t)tp->tp_page;
	te->te_tp = tp;
}

/*
 * A new page of trampolines from the ISA part, every kinst_patchval_t of it
 * a breakpoint nobody answers so that a stray jump traps, added to the
 * pages kinst_tramp_resume_at() searches.  kinst_sx held; sleeps.  ENOMEM
 * if the kernel has no executable page to give.
 */
static int
kinst_tramp_grow(struct kinst_tpool *tl)
{
	struct kinst_tpagev *tv, *old;
	struct kinst_tpage *tp, **last;
	uint8_t *write;
	u_int i, j;

	sx_assert(&kinst_sx, SA_XLOCKED);
	tp = malloc(sizeof(*tp), M_DEVBUF, M_WAITOK | M_ZERO);
	if ((tp->tp_page = kinst_isa_tpage_alloc(&write)) == NULL) {
		free(tp, M_DEVBUF);
		return (ENOMEM);
	}
	kinst_tramp_blank(write, PAGE_SIZE);
	kinst_isa_tramp_sync(tp->tp_page, PAGE_SIZE);
	for (i = 0; i < KINST_TSLOTS; i++) {
		tp->tp_slot[i].ts_tramp = tp->tp_page + i * KINST_TRAMP_SIZE;
		tp->tp_slot[i].ts_write = write + i * KINST_TRAMP_SIZE;
	}

	old = tl->tl_pagev;
	tv = malloc(sizeof(*tv) + ((old == NULL ? 0 : old->tv_n) + 1) *
	    sizeof(tv->tv_e[0]), M_DEVBUF, M_WAITOK);
	tv->tv_n = 0;
	for (j = 0; old != NULL && j < old->tv_n; j++) {
		if (tv->tv_n == j &&
		    old->tv_e[j].te_page > (uintptr_t)tp->tp_page)
			kinst_tpent_set(&tv->tv_e[tv->tv_n++], tp);
		tv->tv_e[tv->tv_n++] = old->tv_e[j];
	}
	if (tv->tv_n == j)
		kinst_tpent_set(&tv->tv_e[tv->tv_n++], tp);
	atomic_store_rel_ptr((volatile uintptr_t *)&tl->tl_pagev,
	    (uintptr_t)tv);
	if (old != NULL) {
		dtrace_sync();	/* no CPU is still searching it */
		free(old, M_DEVBUF);
	}

	mtx_lock(&kinst_tramp_mtx);
	for (last = &tl->tl_pages; *last != NULL; last = &(*last)->tp_next)
		continue;
	*last = tp;
	if (tl->tl_fill == NULL)
		tl->tl_fill = tp;
	tl->tl_nfree += KINST_TSLOTS;
	mtx_unlock(&kinst_tramp_mtx);
	return (0);
}

/*
 * Does 'ts', filled, hold what kp's fill would write there: the same bytes,
 * resuming at the same place?  That, not the probe's fields, decides reuse,
 * so that a slot another build of this module filled is reused only if it
 * is right for this one.
 */
static bool
kinst_tslot_same(const struct kinst_tslot *ts, const struct kinst_probe *kp)
{
	uint8_t buf[KINST_TRAMP_SIZE];
	uintptr_t resume;

	kinst_tramp_blank(buf, sizeof(buf));
	if (kinst_isa_tramp_fill(kp, (uintptr_t)ts->ts_tramp, buf,
	    &resume) != NULL)
		return (false);
	return (resume == ts->ts_resume &&
	    memcmp(buf, ts->ts_tramp, sizeof(buf)) == 0);
}

/*
 * Probe creation (kinst_sx held; may sleep): find the slot already filled
 * for kp's address with what kp would fill, or reserve one for the enable
 * to fill.  Emulated instructions need none.  0 or ENOMEM.
 */
int
kinst_tramp_prepare(struct kinst_probe *kp)
{
	struct kinst_tpool *tl;
	struct kinst_tslot *ts, **pp;
	uintptr_t pc;

	sx_assert(&kinst_sx, SA_XLOCKED);
	if (!kinst_isa_tramp_needed(kp) || kp->kp_tslot != NULL ||
	    kp->kp_reserved)
		return (0);
	if (kinst_tpool == NULL)
		kinst_tpool_attach();
	tl = kinst_tpool;
	pc = (uintptr_t)kp->kp_patchpoint;
	mtx_lock(&kinst_tramp_mtx);
	for (pp = &tl->tl_chain[KINST_TCHAIN(pc)]; (ts = *pp) != NULL;
	    pp = &ts->ts_next) {
		if (ts->ts_patchpoint == pc)
			break;
	}
	if (ts != NULL) {
		if (kinst_tslot_same(ts, kp)) {
			kp->kp_tslot = ts;
			mtx_unlock(&kinst_tramp_mtx);
			return (0);
		}
		/* Retired: left as it is for a thread still inside. */
		*pp = ts->ts_next;
		ts->ts_next = NULL;
	}
	kinst_tslot_reserved++;
	kp->kp_reserved = true;
	while (tl->tl_nfree < kinst_tslot_reserved) {
		mtx_unlock(&kinst_tramp_mtx);
		if (kinst_tramp_grow(tl) != 0) {
			mtx_lock(&kinst_tramp_mtx);
			kinst_tslot_reserved--;
			kp->kp_reserved = false;
			mtx_unlock(&kinst_tramp_mtx);
			return (ENOMEM);
		}
		mtx_lock(&kinst_tramp_mtx);
	}
	mtx_unlock(&kinst_tramp_mtx);
	return (0);
}

/*
 * dtps_enable (kinst_hash_mtx held; must not sleep): give kp its
 * trampoline, the address's slot, or the next free one filled now and made
 * visible to instruction fetch.  The fill is complete before the caller
 * writes the breakpoint (see the ISA part's kinst_isa_arm()).  NULL, or why
 * not (the ISA part's fill refused: the slot stays free and the probe keeps
 * its reservation).
 */
const char *
kinst_tramp_take(struct kinst_probe *kp)
{
	struct kinst_tpool *tl;
	struct kinst_tpage *tp;
	struct kinst_tslot *ts;
	uint8_t buf[KINST_TRAMP_SIZE];
	const char *why;
	uintptr_t pc, resume;

	if (!kinst_isa_tramp_needed(kp) || kp->kp_tramp != NULL)
		return (NULL);
	pc = (uintptr_t)kp->kp_patchpoint;
	mtx_lock(&kinst_tramp_mtx);
	if ((ts = kp->kp_tslot) == NULL) {
		tl = kinst_tpool;
		tp = NULL;
		if (tl != NULL) {
			while ((tp = tl->tl_fill) != NULL &&
			    tp->tp_used == KINST_TSLOTS)
				tl->tl_fill = tp->tp_next;
		}
		if (!kp->kp_reserved || tp == NULL) {
			mtx_unlock(&kinst_tramp_mtx);
			return ("no trampoline was reserved for it");
		}
		ts = &tp->tp_slot[tp->tp_used];
		kinst_tramp_blank(buf, sizeof(buf));
		why = kinst_isa_tramp_fill(kp, (uintptr_t)ts->ts_tramp, buf,
		    &resume);
		if (why != NULL) {
			mtx_unlock(&kinst_tramp_mtx);
			return (why);
		}
		tp->tp_used++;
		tl->tl_nfree--;
		kinst_tslot_reserved--;
		kp->kp_reserved = false;
		memcpy(ts->ts_write, buf, sizeof(buf));
		kinst_isa_tramp_sync(ts->ts_tramp, sizeof(buf));
		ts->ts_patchpoint = pc;
		atomic_store_rel_ptr((volatile uintptr_t *)&ts->ts_resume,
		    resume);
		ts->ts_next = tl->tl_chain[KINST_TCHAIN(pc)];
		tl->tl_chain[KINST_TCHAIN(pc)] = ts;
		kp->kp_tslot = ts;
	}
	kp->kp_tramp = ts->ts_tramp;
	mtx_unlock(&kinst_tramp_mtx);
	return (NULL);
}

/* dtps_destroy: a probe that never filled its reserved slot gives it back. */
void
kinst_tramp_release(struct kinst_probe *kp)
{

	if (!kp->kp_reserved)
		return;
	mtx_lock(&kinst_tramp_mtx);
	kinst_tslot_reserved--;
	kp->kp_reserved = false;
	mtx_unlock(&kinst_tramp_mtx);
}

/*
 * If 'addr' is 'off' bytes into a filled trampoline: where that slot's
 * thread resumes; 0 otherwise.  Probe context: no lock, a binary search
 * over the pages, and no page's bookkeeping read but the one holding
 * 'addr'.
 */
uintptr_t
kinst_tramp_resume_at(uintptr_t addr, uintptr_t off)
{
	struct kinst_tpool *tl;
	struct kinst_tpagev *tv;
	const struct kinst_tpent *te;
	struct kinst_tslot *ts;
	uintptr_t in;
	u_int lo, hi, mid;

	tl = (struct kinst_tpool *)atomic_load_acq_ptr(
	    (volatile uintptr_t *)&kinst_tpool);
	if (tl == NULL)
		return (0);
	tv = (struct kinst_tpagev *)atomic_load_acq_ptr(
	    (volatile uintptr_t *)&tl->tl_pagev);
	if (tv == NULL)
		return (0);
	lo = 0;
	hi = tv->tv_n;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		te = &tv->tv_e[mid];
		in = addr - te->te_page;
		if (in < PAGE_SIZE) {
			if (in % KINST_TRAMP_SIZE != off)
				return (0);
			ts = &te->te_tp->tp_slot[in / KINST_TRAMP_SIZE];
			return (atomic_load_acq_ptr(
			    (volatile uintptr_t *)&ts->ts_resume));
		}
		if (addr < te->te_page)
			hi = mid;
		else
			lo = mid + 1;
	}
	return (0);
}

/*
 * Unload (kinst_sx held), after every probe is destroyed and the ISA part's
 * kinst_tramp_quiesce() has agreed, or after a failed load: the pool is
 * left for the next load (KINST_TRAMP_KEEP), or it goes with its pages.
 */
void
kinst_tramp_fini(void)
{
	struct kinst_tpool *tl;
#ifndef KINST_TRAMP_KEEP
	struct kinst_tpage *tp;
#endif

	sx_assert(&kinst_sx, SA_XLOCKED);
	KASSERT(kinst_tslot_reserved == 0,
	    ("kinst: %u trampolines reserved at unload",
	    kinst_tslot_reserved));
	if ((tl = kinst_tpool) == NULL)
		return;
	/* No CPU searches it: the breakpoint handler is gone. */
	kinst_tpool = NULL;
#ifndef KINST_TRAMP_KEEP
	free(tl->tl_pagev, M_DEVBUF);
	while ((tp = tl->tl_pages) != NULL) {
		tl->tl_pages = tp->tp_next;
		kinst_isa_tpage_free(tp->tp_page);
		free(tp, M_DEVBUF);
	}
	free(tl, M_DEVBUF);
#endif
}

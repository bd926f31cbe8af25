/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_tramp.c: the trampoline pages of the "double breakpoint" ISAs,
 * arm64 and riscv, behind kinst.h's kinst_tramp_*() functions.  A
 * trampoline holds the probed instruction and then the trampoline's own
 * breakpoint (kinst_core_tramp_fill()); the breakpoint handler
 * (kinst_dbp.c) sends a thread into it with kinst_tramp_enter() and, at its
 * breakpoint, asks kinst_tramp_leave() where the thread resumes.
 *
 * The breakpoint is known by its address: each slot records where its
 * thread resumes.  So nothing ties the two breakpoints to a CPU or a thread
 * -- a thread may take an interrupt, be preempted, migrate or leave through
 * an exception while in a trampoline -- and the interrupt mask is never
 * touched.  kinst_tramp_leave() runs on every breakpoint of the kernel that
 * reaches kinst: it finds the page holding the address by binary search
 * over the pages' addresses (kinst_tpagev, replaced as a whole when a page
 * is added), and reads only that page's slot.
 *
 * Slot lifetime, as on amd64.  dtps_enable runs under dtrace_lock and has
 * no way to fail, so it must not sleep or allocate: making a probe
 * (kinst_sx held, may sleep) reserves a slot, mapping a new page when the
 * free slots run out, and enabling takes a reserved slot and fills it
 * (kinst_tramp_take()).  Listing probes (dtrace -l) thus fills nothing, and
 * once the listing's probes are destroyed their reservations serve the
 * next ones.  A filled slot belongs to its (patch point, instruction) pair
 * for the module's lifetime: a probe made there again, and enabled again,
 * gets the same slot with the same contents, and no other pair ever gets
 * it, so a thread inside a trampoline never finds it changed.  Slots are
 * filled in page order, so the free ones are the tail of the newest pages.
 *
 * Unload.  A thread inside a trampoline needs two things that go at unload:
 * the page, and this module's breakpoint handler to answer the
 * trampoline's breakpoint (without it that is an unhandled kernel
 * breakpoint, a panic).  So kinst_tramp_inflight counts the threads sent
 * into a trampoline and not yet back, and kinst_tramp_quiesce(), called at
 * MOD_UNLOAD after dtrace_unregister() has disarmed and destroyed every
 * probe and after a dtrace_sync() (no CPU is still in the handler about to
 * send one in), says whether the count is zero, at once: MOD_UNLOAD holds
 * the kernel linker's kld_sx, which every kldload, kldstat and stack(9)
 * symbol lookup waits for, so it never sleeps there.  Only when the count
 * is zero does the unload remove the handler and kinst_tramp_fini() free
 * the pages; otherwise it is refused with EBUSY, everything kept, and
 * kldunload may be asked again later.  The count is conservative, not
 * exact: a thread that leaves a trampoline other than through its
 * breakpoint -- an exception whose handler does not return to the
 * trampoline, such as a fault on a trampolined load recovered through
 * pcb_onfault to the copyin(9)-style caller's error path -- is never
 * counted out, and from then on every unload of this module is refused
 * until reboot.  That leaks the module, never a page a thread may still
 * run.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/linker.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/sx.h>

#include <sys/dtrace.h>

#include <vm/vm.h>
#include <vm/vm_extern.h>

#include <machine/atomic.h>

#include "kinst_core.h"
#include "kinst.h"
#include "kinst_dbp.h"

#define	KINST_SLOTS		(PAGE_SIZE / KINST_TRAMP_SIZE)
#define	KINST_TSLOTTAB_SIZE	0x1000
#define	KINST_TSLOT_NDX(pc)	(((pc) / 2) & (KINST_TSLOTTAB_SIZE - 1))

/* One trampoline of a page. */
struct kinst_tslot {
	struct kinst_tslot	*ts_next;	/* address chain, once filled */
	uint8_t			*ts_tramp;	/* KINST_TRAMP_SIZE bytes */
	uintptr_t		ts_patchpoint;	/* whose it is, once filled */
	volatile uintptr_t	ts_resume;	/* 0 until filled */
	uint32_t		ts_insn;
};

/* A page of trampolines and its slots' bookkeeping (freed at unload). */
struct kinst_tpage {
	struct kinst_tpage	*tp_next;	/* allocation order */
	uint8_t			*tp_page;
	u_int			tp_used;	/* slots [0, tp_used) filled */
	struct kinst_tslot	tp_slot[KINST_SLOTS];
};

/*
 * Every page by address, for kinst_tramp_leave()'s binary search without
 * a lock: a new vector is published with release order when a page is
 * added, and the old one freed after a dtrace_sync().  The addresses are
 * in the vector, so that the search reads no page's bookkeeping but the
 * one it finds.
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
 * kinst_tramp_mtx guards the slots and the counts; it is taken inside
 * kinst_hash_mtx (enable) or alone, and nothing sleeps under it.  The
 * pages are added under kinst_sx.  Invariant, whenever kinst_sx is not
 * held by a creation in progress: kinst_tslot_nfree >= kinst_tslot_reserved,
 * the number of probes holding a reservation.
 */
static struct mtx	kinst_tramp_mtx;
MTX_SYSINIT(kinst_tramp_mtx, &kinst_tramp_mtx, "kinst trampolines", MTX_DEF);

static struct kinst_tpage	*kinst_tpages;	/* the oldest page */
static struct kinst_tpage	*kinst_tfill;	/* the first with free slots */
static struct kinst_tpagev *volatile kinst_tpagev;
static u_int			kinst_tslot_nfree;
static u_int			kinst_tslot_reserved;
static struct kinst_tslot	*kinst_tslottab[KINST_TSLOTTAB_SIZE];
static volatile u_int		kinst_tramp_inflight;	/* see the top */

static void
kinst_tpent_set(struct kinst_tpent *te, struct kinst_tpage *tp)
{

	te->te_page = (uintptr_t)tp->tp_page;
	te->te_tp = tp;
}

/*
 * A new page of trampolines, a breakpoint nobody answers in every
 * kinst_patchval_t so that a stray jump traps, added to the pages the
 * handler searches.  kinst_sx held; sleeps.  ENOMEM if the kernel has no
 * executable page to give.
 */
static int
kinst_tramp_grow(void)
{
	struct kinst_tpagev *tv, *old;
	struct kinst_tpage *tp, **last;
	u_int i, j;

	sx_assert(&kinst_sx, SA_XLOCKED);
	tp = malloc(sizeof(*tp), M_KINST, M_WAITOK | M_ZERO);
	tp->tp_page = kmem_malloc(PAGE_SIZE, M_WAITOK | M_EXEC);
	if (tp->tp_page == NULL) {
		free(tp, M_KINST);
		return (ENOMEM);
	}
	for (i = 0; i < PAGE_SIZE; i += sizeof(kinst_patchval_t))
		kinst_core_put(tp->tp_page + i, KINST_PATCHVAL,
		    sizeof(kinst_patchval_t));
	kinst_isa_tramp_sync(tp->tp_page, PAGE_SIZE);
	for (i = 0; i < KINST_SLOTS; i++)
		tp->tp_slot[i].ts_tramp = tp->tp_page + i * KINST_TRAMP_SIZE;

	old = kinst_tpagev;
	tv = malloc(sizeof(*tv) + ((old == NULL ? 0 : old->tv_n) + 1) *
	    sizeof(tv->tv_e[0]), M_KINST, M_WAITOK);
	tv->tv_n = 0;
	for (j = 0; old != NULL && j < old->tv_n; j++) {
		if (tv->tv_n == j &&
		    old->tv_e[j].te_page > (uintptr_t)tp->tp_page)
			kinst_tpent_set(&tv->tv_e[tv->tv_n++], tp);
		tv->tv_e[tv->tv_n++] = old->tv_e[j];
	}
	if (tv->tv_n == j)
		kinst_tpent_set(&tv->tv_e[tv->tv_n++], tp);
	atomic_store_rel_ptr((volatile uintptr_t *)&kinst_tpagev,
	    (uintptr_t)tv);
	if (old != NULL) {
		dtrace_sync();	/* no CPU is still searching it */
		free(old, M_KINST);
	}

	mtx_lock(&kinst_tramp_mtx);
	for (last = &kinst_tpages; *last != NULL; last = &(*last)->tp_next)
		continue;
	*last = tp;
	if (kinst_tfill == NULL)
		kinst_tfill = tp;
	kinst_tslot_nfree += KINST_SLOTS;
	mtx_unlock(&kinst_tramp_mtx);
	return (0);
}

/*
 * Probe creation (kinst_sx held; may sleep): find the slot already filled
 * for kp's address and instruction, or reserve one for the enable to fill.
 * Emulated instructions need none.  0 or ENOMEM.
 */
int
kinst_tramp_prepare(struct kinst_probe *kp)
{
	struct kinst_tslot *ts;
	uintptr_t pc;

	sx_assert(&kinst_sx, SA_XLOCKED);
	if (kinst_core_is_emulated(&kp->kp_md) || kp->kp_tslot != NULL ||
	    kp->kp_reserved)
		return (0);
	pc = (uintptr_t)kp->kp_patchpoint;
	mtx_lock(&kinst_tramp_mtx);
	for (ts = kinst_tslottab[KINST_TSLOT_NDX(pc)]; ts != NULL;
	    ts = ts->ts_next) {
		if (ts->ts_patchpoint == pc &&
		    ts->ts_insn == kp->kp_md.km_insn) {
			kp->kp_tslot = ts;
			mtx_unlock(&kinst_tramp_mtx);
			return (0);
		}
	}
	kinst_tslot_reserved++;
	kp->kp_reserved = true;
	while (kinst_tslot_nfree < kinst_tslot_reserved) {
		mtx_unlock(&kinst_tramp_mtx);
		if (kinst_tramp_grow() != 0) {
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
 * trampoline, the pair's slot, or the next free one filled now and made
 * visible to instruction fetch.  The fill is complete before the caller
 * writes the breakpoint, which kinst_isa_write() orders after it.  NULL,
 * or why not.
 */
const char *
kinst_tramp_take(struct kinst_probe *kp)
{
	struct kinst_tpage *tp;
	struct kinst_tslot *ts;
	uintptr_t pc;

	if (kinst_core_is_emulated(&kp->kp_md) || kp->kp_tramp != NULL)
		return (NULL);
	pc = (uintptr_t)kp->kp_patchpoint;
	mtx_lock(&kinst_tramp_mtx);
	if ((ts = kp->kp_tslot) == NULL) {
		while ((tp = kinst_tfill) != NULL && tp->tp_used == KINST_SLOTS)
			kinst_tfill = tp->tp_next;
		if (!kp->kp_reserved || tp == NULL) {
			mtx_unlock(&kinst_tramp_mtx);
			return ("no trampoline was reserved for it");
		}
		ts = &tp->tp_slot[tp->tp_used++];
		kinst_tslot_nfree--;
		kinst_tslot_reserved--;
		kp->kp_reserved = false;
		(void)kinst_core_tramp_fill(&kp->kp_md, ts->ts_tramp);
		kinst_isa_tramp_sync(ts->ts_tramp, KINST_TRAMP_SIZE);
		ts->ts_patchpoint = pc;
		ts->ts_insn = kp->kp_md.km_insn;
		atomic_store_rel_ptr((volatile uintptr_t *)&ts->ts_resume,
		    kinst_core_resume(&kp->kp_md, pc));
		ts->ts_next = kinst_tslottab[KINST_TSLOT_NDX(pc)];
		kinst_tslottab[KINST_TSLOT_NDX(pc)] = ts;
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

/* The breakpoint handler sends a thread into a trampoline. */
void
kinst_tramp_enter(void)
{

	atomic_add_int(&kinst_tramp_inflight, 1);
}

/*
 * If 'addr' is a filled trampoline's own breakpoint: the thread there is
 * back, and this is where it resumes.  0 if 'addr' is no trampoline's
 * breakpoint.  Probe context: no lock; a binary search over the pages.
 */
uintptr_t
kinst_tramp_leave(uintptr_t addr)
{
	struct kinst_tpagev *tv;
	const struct kinst_tpent *te;
	struct kinst_tslot *ts;
	uintptr_t off, resume;
	u_int lo, hi, mid;

	tv = (struct kinst_tpagev *)atomic_load_acq_ptr(
	    (volatile uintptr_t *)&kinst_tpagev);
	if (tv == NULL)
		return (0);
	lo = 0;
	hi = tv->tv_n;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		te = &tv->tv_e[mid];
		off = addr - te->te_page;
		if (off < PAGE_SIZE) {
			if (off % KINST_TRAMP_SIZE != KINST_INSN_SIZE)
				return (0);
			ts = &te->te_tp->tp_slot[off / KINST_TRAMP_SIZE];
			resume = atomic_load_acq_ptr(
			    (volatile uintptr_t *)&ts->ts_resume);
			if (resume != 0)
				atomic_subtract_int(&kinst_tramp_inflight, 1);
			return (resume);
		}
		if (addr < te->te_page)
			hi = mid;
		else
			lo = mid + 1;
	}
	return (0);
}

/*
 * MOD_UNLOAD, kld_sx held, after dtrace_unregister() (every probe disarmed
 * and destroyed): true if no thread is inside a trampoline, false if one
 * still is (see the top comment).  Never sleeps.
 */
bool
kinst_tramp_quiesce(void)
{

	/* No CPU is still in the handler about to send a thread in. */
	dtrace_sync();
	return (atomic_load_acq_int(&kinst_tramp_inflight) == 0);
}

/*
 * Unload, after kinst_tramp_quiesce() and dtrace_invop_remove(): the pages
 * and the slots go.  MOD_UNLOAD refuses the unload while the count is not
 * zero, and a failed load armed nothing.
 */
void
kinst_tramp_fini(void)
{
	struct kinst_tpage *tp;
	u_int i;

	sx_assert(&kinst_sx, SA_XLOCKED);
	KASSERT(kinst_tramp_inflight == 0,
	    ("kinst: %u threads in trampolines at unload",
	    kinst_tramp_inflight));
	KASSERT(kinst_tslot_reserved == 0,
	    ("kinst: %u trampolines reserved at unload",
	    kinst_tslot_reserved));
	free(kinst_tpagev, M_KINST);
	kinst_tpagev = NULL;
	while ((tp = kinst_tpages) != NULL) {
		kinst_tpages = tp->tp_next;
		kmem_free(tp->tp_page, PAGE_SIZE);
		free(tp, M_KINST);
	}
	kinst_tfill = NULL;
	kinst_tslot_nfree = 0;
	for (i = 0; i < KINST_TSLOTTAB_SIZE; i++)
		kinst_tslottab[i] = NULL;
}

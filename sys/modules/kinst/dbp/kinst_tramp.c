/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_tramp.c: the trampoline pages of the "double breakpoint" ISAs,
 * arm64 and riscv, behind kinst.h's kinst_tramp_*() functions.  A
 * trampoline holds the probed instruction and then the trampoline's own
 * breakpoint (kinst_core_tramp_fill()); the ISA's breakpoint handler
 * (<arch>/kinst_isa.c) sends a thread into it with kinst_tramp_enter() and,
 * at its breakpoint, asks kinst_tramp_leave() where the thread resumes.
 *
 * The breakpoint is known by its address: each slot records where its
 * thread resumes.  So nothing ties the two breakpoints to a CPU or a thread
 * -- a thread may take an interrupt, be preempted, migrate or leave through
 * an exception while in a trampoline -- and the interrupt mask is never
 * touched (stock kinst masks interrupts from the first breakpoint to the
 * second and keeps the probe in per-CPU state; an instruction run in its
 * trampoline that reads or sets the mask sees or leaves the wrong one).
 *
 * A slot is filled once, when its probe is made (kinst_tramp_prepare()),
 * for one instruction at one address, and is reused only for that pair, so
 * a thread inside a trampoline never finds it changed.
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
 * kldunload may be asked again later.  The count is conservative, not exact: a thread that leaves
 * a trampoline other than through its breakpoint -- an exception whose
 * handler does not return to the trampoline, such as a fault on a
 * trampolined load recovered through pcb_onfault to the copyin(9)-style
 * caller's error path -- is never counted out, and from then on every
 * unload of this module is refused until reboot.  That leaks the module,
 * never a page a thread may still run.
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
#include "kinst_tramp.h"

#define	KINST_SLOTS	(PAGE_SIZE / KINST_TRAMP_SIZE)
#define	KINST_SLOTHASH	1024

/* A page of trampolines, and where each slot's thread resumes. */
struct kinst_tpage {
	struct kinst_tpage	*tp_next;	/* published with release order */
	uint8_t			*tp_page;
	u_int			tp_used;
	uintptr_t		tp_resume[KINST_SLOTS];
};

/* The slot of one (patch point, instruction) pair, for reuse. */
struct kinst_tslot {
	struct kinst_tslot	*ts_next;
	uintptr_t		ts_patchpoint;
	uint32_t		ts_insn;
	uint8_t			*ts_tramp;
};

static struct kinst_tpage *volatile kinst_tpages;
static struct kinst_tslot *kinst_tslots[KINST_SLOTHASH];
static volatile u_int kinst_tramp_inflight;	/* see the top comment */

/*
 * The trampoline for 'md' at 'patchpoint': the pair's slot if it has one,
 * else a new slot, filled.  Called with kinst_sx held (kinst.c serialises
 * probe preparation), so the lists change under one writer; the breakpoint
 * handler only ever reads kinst_tpages.
 */
static uint8_t *
kinst_tramp_get(const struct kinst_md *md, uintptr_t patchpoint)
{
	struct kinst_tslot *ts, **head;
	struct kinst_tpage *tp;
	uint8_t *tramp;
	u_int i;

	/* Patch points are at least 2-byte aligned on both ISAs. */
	head = &kinst_tslots[(patchpoint / 2) % KINST_SLOTHASH];
	for (ts = *head; ts != NULL; ts = ts->ts_next) {
		if (ts->ts_patchpoint == patchpoint &&
		    ts->ts_insn == md->km_insn)
			return (ts->ts_tramp);
	}
	tp = kinst_tpages;
	if (tp == NULL || tp->tp_used == KINST_SLOTS) {
		tp = malloc(sizeof(*tp), M_KINST, M_WAITOK | M_ZERO);
		tp->tp_page = (uint8_t *)kmem_malloc(PAGE_SIZE,
		    M_WAITOK | M_EXEC);
		kinst_isa_tramp_page(tp->tp_page);
		tp->tp_next = kinst_tpages;
		atomic_store_rel_ptr((volatile uintptr_t *)&kinst_tpages,
		    (uintptr_t)tp);
	}
	i = tp->tp_used;
	tramp = tp->tp_page + i * KINST_TRAMP_SIZE;
	if (kinst_core_tramp_fill(md, tramp) != 0)
		return (NULL);
	tp->tp_resume[i] = kinst_core_resume(md, patchpoint);
	kinst_isa_tramp_sync(tramp, KINST_TRAMP_SIZE);
	atomic_thread_fence_rel();
	tp->tp_used = i + 1;
	ts = malloc(sizeof(*ts), M_KINST, M_WAITOK);
	ts->ts_patchpoint = patchpoint;
	ts->ts_insn = md->km_insn;
	ts->ts_tramp = tramp;
	ts->ts_next = *head;
	*head = ts;
	return (tramp);
}

/* The breakpoint handler sends a thread into a trampoline. */
void
kinst_tramp_enter(void)
{

	atomic_add_int(&kinst_tramp_inflight, 1);
}

/*
 * If 'addr' is a trampoline's own breakpoint: the thread there is back, and
 * this is where it resumes.  0 if 'addr' is no trampoline's breakpoint.
 */
uintptr_t
kinst_tramp_leave(uintptr_t addr)
{
	struct kinst_tpage *tp;
	uintptr_t off;

	tp = (struct kinst_tpage *)atomic_load_acq_ptr(
	    (volatile uintptr_t *)&kinst_tpages);
	for (; tp != NULL; tp = tp->tp_next) {
		off = addr - (uintptr_t)tp->tp_page;
		if (off >= PAGE_SIZE)
			continue;
		if (off % KINST_TRAMP_SIZE != KINST_INSN_SIZE ||
		    off / KINST_TRAMP_SIZE >= tp->tp_used)
			return (0);
		atomic_subtract_int(&kinst_tramp_inflight, 1);
		return (tp->tp_resume[off / KINST_TRAMP_SIZE]);
	}
	return (0);
}

/*
 * Probe creation (kinst_sx held; may sleep): the trampoline of kp's
 * instruction at kp's address, filled now, unless the instruction is
 * emulated.  0 or ENOMEM.
 */
int
kinst_tramp_prepare(struct kinst_probe *kp)
{

	sx_assert(&kinst_sx, SA_XLOCKED);
	if (kinst_core_is_emulated(&kp->kp_md) || kp->kp_tramp != NULL)
		return (0);
	kp->kp_tramp = kinst_tramp_get(&kp->kp_md,
	    (uintptr_t)kp->kp_patchpoint);
	return (kp->kp_tramp == NULL ? ENOMEM : 0);
}

/* dtps_enable: the trampoline was filled when the probe was made. */
const char *
kinst_tramp_take(struct kinst_probe *kp)
{

	if (kinst_core_is_emulated(&kp->kp_md) || kp->kp_tramp != NULL)
		return (NULL);
	return ("it has no trampoline");
}

/* dtps_destroy: the slot stays with its address. */
void
kinst_tramp_release(struct kinst_probe *kp __unused)
{
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
	struct kinst_tslot *ts;
	u_int i;

	sx_assert(&kinst_sx, SA_XLOCKED);
	KASSERT(kinst_tramp_inflight == 0,
	    ("kinst: %u threads in trampolines at unload",
	    kinst_tramp_inflight));
	while ((tp = kinst_tpages) != NULL) {
		kinst_tpages = tp->tp_next;
		kmem_free(tp->tp_page, PAGE_SIZE);
		free(tp, M_KINST);
	}
	for (i = 0; i < KINST_SLOTHASH; i++) {
		while ((ts = kinst_tslots[i]) != NULL) {
			kinst_tslots[i] = ts->ts_next;
			free(ts, M_KINST);
		}
	}
}

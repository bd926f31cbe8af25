/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_isa.c: the amd64 part of kinstkit's kinst provider: the breakpoint
 * handler (trapframe to struct kinst_regs and back), writing the breakpoint
 * byte, and the trampolines, behind the interface ../kinst.h declares for
 * every ISA.  The machine-independent rest is in ../kinst.c.
 *
 * Trampolines are static and per patch address, not per thread and per CPU
 * as in stock amd64 kinst, which rewrites a shared trampoline on every hit
 * because the rel32 fix-up depends on where the trampoline is.  There, a
 * thread interrupted or faulting inside its trampoline resumes into whatever
 * the trampoline holds by then, and code running on the same thread in
 * between (a fault handler, a preemption with interrupts enabled) may have
 * hit another probe and refilled it.  Here a trampoline slot is filled once,
 * for one instruction at one address, when a probe there is first enabled,
 * and never written again: any number of CPUs and threads may run, be
 * interrupted in, be preempted in or sleep in it, nested hits use other
 * slots, and the interrupt flag is the interrupted code's own (popf and sti
 * are refused by the generator anyway).
 *
 * Slot lifetime.  dtps_enable runs under dtrace_lock and has no way to fail,
 * so it must not sleep or allocate: making a probe (kinst_sx held, may
 * sleep) reserves a slot, mapping a new page when the free slots run out,
 * and enabling takes a reserved slot and fills it (kinst_tramp_take()).  A
 * filled slot belongs to its patch address for the module's lifetime: a
 * probe made there again, and enabled again, gets the same slot with the
 * same contents, and no other address ever gets it.  If the instruction at
 * an address changes (a .ko reloaded there with other relocated values) the
 * old slot is retired, still untouched, and a new one reserved.
 *
 * Unload keeps the pages, deliberately.  #BP returns with the interrupted
 * code's PSL_I, so a thread can be preempted with %rip inside a trampoline,
 * and a trampolined instruction can fault and sleep; dtrace_sync() waits
 * only for CPUs in probe context, not for such threads, and no cheap
 * quiescence point proves that none is left.  Unmapping would make such a
 * thread fault when it resumes, so the pages stay mapped (and their contents
 * valid) after kldunload: one 4 KiB page per 128 trampolines per load.
 * Nor does unload wait for such threads (kinst_tramp_quiesce()): a
 * trampoline here ends in a jmp back to the instruction after the patch
 * point, not in a breakpoint only this module answers, so a thread still in
 * one after the breakpoint handler is gone finishes it unaided.
 *
 * Trampoline pages are mapped above KERNBASE, in the kernel's top 2 GiB like
 * the kernel text and every module (sys/cddl/dev/kinst/trampoline.c does the
 * same), so that the rewritten rel32 of a RIP-relative instruction reaches
 * its target; kinst_core_tramp_fill() refuses the enable if it does not.
 * They are mapped read and execute only (stock kinst maps them RWX): a page
 * is filled with int3 and its slots are filled through the direct map
 * (PHYS_TO_DMAP() of the page, read-write and never executable), so no
 * mapping of a trampoline is ever both writable and executable.  The CPU
 * that takes a probe's #BP runs iretq, serializing, before it fetches from
 * the slot the enable filled.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/linker.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/mutex.h>
#include <sys/pcpu.h>
#include <sys/queue.h>
#include <sys/sx.h>

#include <sys/dtrace.h>

#include <vm/vm.h>
#include <vm/pmap.h>
#include <vm/vm_extern.h>
#include <vm/vm_kern.h>
#include <vm/vm_map.h>
#include <vm/vm_object.h>
#include <vm/vm_param.h>

#include <machine/atomic.h>
#include <machine/cpufunc.h>
#include <machine/frame.h>
#include <machine/md_var.h>

#include "kinst_core.h"
#include "kinst.h"

#if !defined(__amd64__)
#error "the kinstkit kinst glue is amd64 only"
#endif
#ifndef DTRACE_INVOP_CALL
#error "no call emulation in dtrace_invop_start(): FreeBSD 14.0 or later"
#endif

#define	KINST_TRAMPS_PER_PAGE	(PAGE_SIZE / KINST_TRAMP_SIZE)
#define	KINST_TSLOTTAB_SIZE	0x1000
#define	KINST_TSLOT_NDX(addr)	((uintptr_t)(addr) & (KINST_TSLOTTAB_SIZE - 1))

/* One trampoline of a page. */
struct kinst_tslot {
	struct kinst_tslot	*ts_next;	/* free list or address chain */
	uint8_t			*ts_tramp;	/* where it runs */
	uint8_t			*ts_write;	/* it, in the direct map */
	uintptr_t		ts_addr;	/* patch point; 0: unused */
	struct kinst_md		ts_md;		/* what it was filled from */
};

/* A trampoline page and its slots' bookkeeping (freed at unload). */
struct kinst_trampchunk {
	SLIST_ENTRY(kinst_trampchunk) tc_next;
	vm_offset_t		tc_addr;
	struct kinst_tslot	tc_slots[KINST_TRAMPS_PER_PAGE];
};

/*
 * kinst_tramp_mtx guards what follows; it is taken inside kinst_hash_mtx
 * (enable) or alone, and nothing sleeps under it.  Invariant, whenever
 * kinst_sx is not held by a creation in progress: kinst_tslot_nfree >=
 * kinst_tslot_reserved, the number of probes holding a reservation.
 */
static struct mtx	kinst_tramp_mtx;
MTX_SYSINIT(kinst_tramp_mtx, &kinst_tramp_mtx, "kinst trampolines", MTX_DEF);

static SLIST_HEAD(, kinst_trampchunk) kinst_trampchunks =
    SLIST_HEAD_INITIALIZER(kinst_trampchunks);
static struct kinst_tslot	*kinst_tslot_free;	/* never filled */
static u_int			kinst_tslot_nfree;
static u_int			kinst_tslot_reserved;
static struct kinst_tslot	*kinst_tslottab[KINST_TSLOTTAB_SIZE];

/*
 * A page above KERNBASE, read and execute only, filled with int3 (through
 * the direct map) so that a stray jump traps cleanly, and its slots.  May
 * sleep; NULL when the kernel map is full.
 */
static struct kinst_trampchunk *
kinst_trampchunk_alloc(void)
{
	struct kinst_trampchunk *tc;
	vm_offset_t addr;
	uint8_t *alias;
	u_int i;

	addr = KERNBASE;
	if (vm_map_find(kernel_map, NULL, 0, &addr, PAGE_SIZE, 0,
	    VMFS_ANY_SPACE, VM_PROT_READ | VM_PROT_EXECUTE, VM_PROT_ALL, 0) !=
	    KERN_SUCCESS)
		return (NULL);
	if (kmem_back(kernel_object, addr, PAGE_SIZE, M_WAITOK | M_EXEC) !=
	    KERN_SUCCESS) {
		(void)vm_map_remove(kernel_map, addr, addr + PAGE_SIZE);
		return (NULL);
	}
	/* kmem_back() maps it read, write and execute: drop the write. */
	alias = (uint8_t *)PHYS_TO_DMAP(pmap_kextract(addr));
	memset(alias, KINST_PATCHVAL, PAGE_SIZE);
	pmap_protect(kernel_pmap, addr, addr + PAGE_SIZE,
	    VM_PROT_READ | VM_PROT_EXECUTE);
	tc = malloc(sizeof(*tc), M_KINST, M_WAITOK | M_ZERO);
	tc->tc_addr = addr;
	for (i = 0; i < KINST_TRAMPS_PER_PAGE; i++) {
		tc->tc_slots[i].ts_tramp = (uint8_t *)(addr +
		    i * KINST_TRAMP_SIZE);
		tc->tc_slots[i].ts_write = alias + i * KINST_TRAMP_SIZE;
	}
	return (tc);
}

/* Would a slot filled from 'a' hold what one filled from 'b' would? */
static bool
kinst_tramp_same(const struct kinst_md *a, const struct kinst_md *b)
{
	u_int i;

	if (a->km_kind != b->km_kind || a->km_flags != b->km_flags ||
	    a->km_instlen != b->km_instlen ||
	    a->km_tinstlen != b->km_tinstlen ||
	    a->km_dispoff != b->km_dispoff || a->km_disp != b->km_disp)
		return (false);
	for (i = 0; i < a->km_tinstlen && i < KINST_TEMPLATE_SIZE; i++) {
		if (a->km_template[i] != b->km_template[i])
			return (false);
	}
	return (true);
}

/*
 * Probe creation (kinst_sx held; may sleep): find the slot already filled
 * for kp's address with the same contents, or reserve one for the enable to
 * fill.  Calls are emulated and need none.  0 or ENOMEM.
 */
int
kinst_tramp_prepare(struct kinst_probe *kp)
{
	struct kinst_trampchunk *tc;
	struct kinst_tslot *ts, **pp;
	uintptr_t pc;
	u_int i;

	sx_assert(&kinst_sx, SA_XLOCKED);
	if (kinst_core_is_call(&kp->kp_md))
		return (0);
	pc = (uintptr_t)kp->kp_patchpoint;
	mtx_lock(&kinst_tramp_mtx);
	for (pp = &kinst_tslottab[KINST_TSLOT_NDX(pc)]; (ts = *pp) != NULL;
	    pp = &ts->ts_next) {
		if (ts->ts_addr == pc)
			break;
	}
	if (ts != NULL) {
		if (kinst_tramp_same(&ts->ts_md, &kp->kp_md)) {
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
	while (kinst_tslot_nfree < kinst_tslot_reserved) {
		mtx_unlock(&kinst_tramp_mtx);
		tc = kinst_trampchunk_alloc();
		mtx_lock(&kinst_tramp_mtx);
		if (tc == NULL) {
			kinst_tslot_reserved--;
			kp->kp_reserved = false;
			mtx_unlock(&kinst_tramp_mtx);
			return (ENOMEM);
		}
		SLIST_INSERT_HEAD(&kinst_trampchunks, tc, tc_next);
		for (i = KINST_TRAMPS_PER_PAGE; i-- > 0;) {
			tc->tc_slots[i].ts_next = kinst_tslot_free;
			kinst_tslot_free = &tc->tc_slots[i];
		}
		kinst_tslot_nfree += KINST_TRAMPS_PER_PAGE;
	}
	mtx_unlock(&kinst_tramp_mtx);
	return (0);
}

/*
 * dtps_enable (dtrace_lock held; must not sleep): give kp its trampoline,
 * the address's slot, or a reserved one filled now.  The fill is complete
 * before the caller writes the breakpoint, and the CPU that takes the trap
 * runs iretq (serializing) before it fetches from the slot.  NULL, or why
 * not: the core's KINST_E_RANGE (the target is beyond rel32 reach of the
 * slot), in which case the slot goes back unused and the probe keeps its
 * reservation.
 */
const char *
kinst_tramp_take(struct kinst_probe *kp)
{
	struct kinst_tslot *ts;
	uintptr_t pc;

	if (kinst_core_is_call(&kp->kp_md) || kp->kp_tramp != NULL)
		return (NULL);
	pc = (uintptr_t)kp->kp_patchpoint;
	mtx_lock(&kinst_tramp_mtx);
	if ((ts = kp->kp_tslot) == NULL) {
		ts = kinst_tslot_free;
		if (!kp->kp_reserved || ts == NULL) {
			mtx_unlock(&kinst_tramp_mtx);
			return ("no trampoline was reserved for it");
		}
		if (kinst_core_tramp_fill(&kp->kp_md, pc,
		    (uintptr_t)ts->ts_tramp, ts->ts_write) != 0) {
			memset(ts->ts_write, KINST_PATCHVAL, KINST_TRAMP_SIZE);
			mtx_unlock(&kinst_tramp_mtx);
			return ("its trampoline cannot reach the instruction's "
			    "target (beyond +-2 GiB)");
		}
		kinst_tslot_free = ts->ts_next;
		kinst_tslot_nfree--;
		kinst_tslot_reserved--;
		kp->kp_reserved = false;
		ts->ts_addr = pc;
		ts->ts_md = kp->kp_md;
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

/*
 * Unload, after every probe is disarmed and destroyed: nothing to wait for
 * (see the comment at the top).
 */
bool
kinst_tramp_quiesce(void)
{

	return (true);
}

/*
 * Unload, after every probe is gone: the bookkeeping goes, the pages stay
 * mapped with their contents (see the comment at the top).
 */
void
kinst_tramp_fini(void)
{
	struct kinst_trampchunk *tc;
	u_int i;

	sx_assert(&kinst_sx, SA_XLOCKED);
	mtx_lock(&kinst_tramp_mtx);
	KASSERT(kinst_tslot_reserved == 0,
	    ("kinst: %u trampolines reserved at unload", kinst_tslot_reserved));
	kinst_tslot_free = NULL;
	kinst_tslot_nfree = 0;
	for (i = 0; i < KINST_TSLOTTAB_SIZE; i++)
		kinst_tslottab[i] = NULL;
	mtx_unlock(&kinst_tramp_mtx);
	while ((tc = SLIST_FIRST(&kinst_trampchunks)) != NULL) {
		SLIST_REMOVE_HEAD(&kinst_trampchunks, tc_next);
		free(tc, M_KINST);
	}
}

/*
 * kinst_patch_tracepoint(): write 'val' over the byte at 'pc' if it still is
 * 'expect'; one byte, with CR0.WP clear and interrupts off.  false if the
 * byte was something else and was left.  Every DTrace provider patches from
 * its enable and disable callbacks, under dtrace_lock, as ours do, so no
 * other provider writes between the compare and the write.
 */
static bool
kinst_patch(uint8_t *pc, uint8_t expect, uint8_t val)
{
	register_t intr;
	bool old_wp, done;

	intr = intr_disable();
	old_wp = disable_wp();
	done = *(volatile uint8_t *)pc == expect;
	if (done)
		*(volatile uint8_t *)pc = val;
	restore_wp(old_wp);
	intr_restore(intr);
	return (done);
}

/* The byte at 'p': int3 covers one. */
kinst_patchval_t
kinst_isa_peek(const struct kinst_probe *kp __unused,
    const volatile uint8_t *p)
{

	return (*p);
}

/* In a copy of kp's first byte: the original, if it is our int3. */
void
kinst_isa_unpatch(const struct kinst_probe *kp, uint8_t *copy)
{

	if (*copy == KINST_PATCHVAL)
		*copy = kp->kp_savedval;
}

bool
kinst_isa_arm(struct kinst_probe *kp)
{

	return (kinst_patch(kp->kp_patchpoint, kp->kp_savedval,
	    KINST_PATCHVAL));
}

bool
kinst_isa_disarm(struct kinst_probe *kp)
{

	return (kinst_patch(kp->kp_patchpoint, KINST_PATCHVAL,
	    kp->kp_savedval));
}

/*
 * The dtrace_invop() hook, called by dtrace_invop_start() with interrupts
 * disabled for every int3 in the kernel.  'addr' is the breakpoint's address
 * and 'scratch' a 16-byte slot from which bp_call pushes the return address
 * of an emulated call.  No lock, no allocation, no table access, no call
 * into code that could itself be probed: the probe comes from the address
 * chains, with what was derived when it was made.
 */
int
kinst_invop(uintptr_t addr, struct trapframe *frame, uintptr_t scratch)
{
	solaris_cpu_t *cpu;
	struct kinst_probe *kp;
	struct kinst_regs kr;
	uint64_t target, retaddr;
	uintptr_t *stack;
	uint8_t *tramp;
	u_int state;

	if ((kp = kinst_probe_at(addr)) == NULL)
		return (0);
	state = atomic_load_acq_int(&kp->kp_state);
	/*
	 * Disarmed, our byte is back: a trap now can only be one taken just
	 * before, unless another provider has since put its own int3 here.
	 */
	if (state == KINST_S_IDLE ||
	    (state == KINST_S_DISARMED && *kp->kp_patchpoint == KINST_PATCHVAL))
		return (0);

	/* regs[] reports the breakpoint's address, as in stock kinst. */
	frame->tf_rip--;
	if (kp->kp_id != 0) {
		cpu = &solaris_cpu[curcpu];
		stack = (uintptr_t *)frame->tf_rsp;
		DTRACE_CPUFLAG_SET(CPU_DTRACE_NOFAULT);
		cpu->cpu_dtrace_caller = stack[0];
		DTRACE_CPUFLAG_CLEAR(CPU_DTRACE_NOFAULT | CPU_DTRACE_BADADDR);
		dtrace_probe(kp->kp_id, 0, 0, 0, 0, 0);
		cpu->cpu_dtrace_caller = 0;
	}

	if (kinst_core_is_call(&kp->kp_md)) {
		kr.kr_gpr[0] = frame->tf_rax;
		kr.kr_gpr[1] = frame->tf_rcx;
		kr.kr_gpr[2] = frame->tf_rdx;
		kr.kr_gpr[3] = frame->tf_rbx;
		kr.kr_gpr[4] = frame->tf_rsp;
		kr.kr_gpr[5] = frame->tf_rbp;
		kr.kr_gpr[6] = frame->tf_rsi;
		kr.kr_gpr[7] = frame->tf_rdi;
		kr.kr_gpr[8] = frame->tf_r8;
		kr.kr_gpr[9] = frame->tf_r9;
		kr.kr_gpr[10] = frame->tf_r10;
		kr.kr_gpr[11] = frame->tf_r11;
		kr.kr_gpr[12] = frame->tf_r12;
		kr.kr_gpr[13] = frame->tf_r13;
		kr.kr_gpr[14] = frame->tf_r14;
		kr.kr_gpr[15] = frame->tf_r15;
		kr.kr_rip = addr;
		kr.kr_rflags = frame->tf_rflags;
		if (kinst_core_call(&kp->kp_md, addr, &kr, &target,
		    &retaddr) == 0) {
			*(uintptr_t *)scratch = retaddr;
			frame->tf_rip = (register_t)target;
			return (DTRACE_INVOP_CALL);
		}
	} else if ((tramp = kp->kp_tramp) != NULL) {
		frame->tf_rip = (register_t)tramp;
		return (DTRACE_INVOP_NOP);
	}

	/*
	 * Unreachable: an armed probe has its trampoline, and only calls are
	 * emulated.  As stock kinst does when it has no trampoline: put the
	 * instruction back and run it in place.  Nothing may be printed here.
	 */
	(void)kinst_patch(kp->kp_patchpoint, KINST_PATCHVAL, kp->kp_savedval);
	atomic_store_rel_int(&kp->kp_state, KINST_S_DISARMED);
	frame->tf_rip = (register_t)addr;
	return (DTRACE_INVOP_NOP);
}

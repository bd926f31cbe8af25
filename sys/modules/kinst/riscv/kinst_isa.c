/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_isa.c: the riscv part of kinstkit's kinst provider: the breakpoint
 * handler (trapframe to struct kinst_regs and back), writing c.ebreak, and
 * the trampoline pages, behind the interface ../kinst.h declares for every
 * ISA.  The machine-independent rest is in ../kinst.c.
 *
 * A hit on a probe (c.ebreak over the first halfword of its instruction,
 * compressed or not: stock kinst writes a 4-byte ebreak over a 4-byte
 * instruction, which at a 2-byte-aligned address takes two stores) fires
 * the DTrace probe and resumes one of two ways:
 * kinst_core_emulate() runs the instruction over the register file (jal,
 * jalr, the branches, auipc and their compressed forms), or the thread goes
 * to the probe's trampoline [instruction][c.nop][ebreak] and the
 * trampoline's ebreak brings it back to the instruction after the patch
 * point.  The trampoline's ebreak is known by its address: each trampoline
 * slot records where its thread resumes.  So nothing ties the two
 * breakpoints to a CPU or a thread -- a thread may take an interrupt, be
 * preempted, migrate or leave through an exception while in a trampoline --
 * and sstatus is never touched (stock kinst clears SPIE from the first
 * ebreak to the second and keeps the probe in per-CPU state).
 *
 * Register numbers map to the trapframe's named slots (x0 reads as zero
 * and a write to it vanishes: stock kinst writes an auipc with rd = x0
 * through offset -1).
 *
 * A slot is filled once, when its probe is made (kinst_tramp_prepare()),
 * for one instruction at one address, and is reused only for that pair, so
 * a thread inside a trampoline never finds it changed.
 *
 * Unload.  A thread inside a trampoline needs two things that go at unload:
 * the page, and this module's breakpoint handler to answer the
 * trampoline's ebreak (without it the ebreak is an unhandled kernel
 * breakpoint, a panic).  So kinst_tramp_inflight counts the threads sent
 * into a trampoline (kinst_invop() adds one when it redirects to a
 * trampoline and takes one off when a trampoline's ebreak sends a thread
 * back), and kinst_tramp_quiesce(), called at MOD_UNLOAD after
 * dtrace_unregister() has disarmed and destroyed every probe and after a
 * dtrace_sync() (no CPU is still in kinst_invop() about to send one in),
 * waits a bounded time for the count to reach zero.  Only then does the
 * unload remove the handler and kinst_tramp_fini() free the pages;
 * otherwise it is refused with EBUSY, everything kept, and may be asked
 * again.  The count is conservative, not exact: a thread that leaves a
 * trampoline other than through its ebreak -- an exception whose handler
 * does not return to the trampoline, such as a fault on a trampolined load
 * recovered through pcb_onfault to the copyin(9)-style caller's error path
 * -- never takes its one off, and from then on every unload of this module
 * is refused until reboot.  That leaks the module, never a page a thread
 * may still run.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/linker.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/pcpu.h>
#include <sys/sx.h>

#include <sys/dtrace.h>

#include <vm/vm.h>
#include <vm/vm_extern.h>

#include <machine/atomic.h>
#include <machine/cpufunc.h>
#include <machine/frame.h>

#include "kinst_core.h"
#include "kinst.h"

#if !defined(__riscv)
#error "this is the riscv part of the kinstkit kinst glue"
#endif

#define	KINST_ISA_NOP	0x0001		/* MATCH_C_NOP: SEPC stays as set */
#define	KINST_SLOTS	(PAGE_SIZE / KINST_TRAMP_SIZE)
#define	KINST_SLOTHASH	1024
#define	KINST_QUIESCE_TRIES	20	/* of 1/10 s each */

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

/* The trapframe slot of x1-x31, in the order struct trapframe keeps them. */
static uint64_t *
kinst_isa_reg(struct trapframe *frame, int n)
{

	switch (n) {
	case 1:
		return (&frame->tf_ra);
	case 2:
		return (&frame->tf_sp);
	case 3:
		return (&frame->tf_gp);
	case 4:
		return (&frame->tf_tp);
	case 5: case 6: case 7:
		return (&frame->tf_t[n - 5]);
	case 8: case 9:
		return (&frame->tf_s[n - 8]);
	case 28: case 29: case 30: case 31:
		return (&frame->tf_t[n - 28 + 3]);
	default:
		if (n >= 10 && n <= 17)
			return (&frame->tf_a[n - 10]);
		return (&frame->tf_s[n - 18 + 2]);	/* 18-27: s2-s11 */
	}
}

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

	head = &kinst_tslots[(patchpoint / KINST_INSN_C_SIZE) % KINST_SLOTHASH];
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
		/* Every unused halfword a c.ebreak nobody answers: a stray jump traps. */
		for (i = 0; i < PAGE_SIZE; i += KINST_INSN_C_SIZE)
			*(uint16_t *)(tp->tp_page + i) = KINST_PATCHVAL;
		tp->tp_next = kinst_tpages;
		atomic_store_rel_ptr((volatile uintptr_t *)&kinst_tpages,
		    (uintptr_t)tp);
	}
	i = tp->tp_used;
	tramp = tp->tp_page + i * KINST_TRAMP_SIZE;
	if (kinst_core_tramp_fill(md, tramp) != 0)
		return (NULL);
	tp->tp_resume[i] = kinst_core_resume(md, patchpoint);
	fence_i();
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

/* Where the thread at a trampoline's ebreak 'addr' resumes; 0 if it is none. */
static uintptr_t
kinst_tramp_resume(uintptr_t addr)
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
		return (tp->tp_resume[off / KINST_TRAMP_SIZE]);
	}
	return (0);
}

/*
 * The halfword at 'p', little-endian: what a probe's breakpoint covers (the
 * first halfword of its instruction, whatever the instruction's length).
 */
static uint16_t
kinst_isa_get(const struct kinst_probe *kp __unused, const volatile uint8_t *p)
{

	return ((uint16_t)(p[0] | p[1] << 8));
}

/* kp's breakpoint: c.ebreak (kinst_core_patch()). */
static uint16_t
kinst_isa_bp(const struct kinst_probe *kp)
{
	uint8_t bp[KINST_INSN_SIZE];

	(void)kinst_core_patch(&kp->kp_md, bp);
	return (kinst_isa_get(kp, bp));
}

/*
 * kinst_patch_tracepoint(): write 'val' over the first halfword of kp's
 * instruction if it still is 'expect', then fence.i.  One 16-bit store at
 * a 2-byte-aligned address, so no hart ever fetches a half-written
 * instruction; the rest of a 4-byte instruction is never written.  false if
 * the halfword was something else and was left.  Every DTrace provider
 * patches from its enable and disable callbacks, under dtrace_lock, as ours
 * do, so no other provider writes between the compare and the write.
 */
static bool
kinst_isa_patch(struct kinst_probe *kp, uint16_t expect, uint16_t val)
{

	if (kinst_isa_get(kp, kp->kp_patchpoint) != expect)
		return (false);
	*(volatile uint16_t *)kp->kp_patchpoint = val;
	fence_i();
	return (true);
}

kinst_patchval_t
kinst_isa_peek(const struct kinst_probe *kp, const volatile uint8_t *p)
{

	return (kinst_isa_get(kp, p));
}

/* In a copy of kp's instruction: the original, if it is our breakpoint. */
void
kinst_isa_unpatch(const struct kinst_probe *kp, uint8_t *copy)
{

	if (kinst_isa_get(kp, copy) != kinst_isa_bp(kp))
		return;
	copy[0] = (uint8_t)kp->kp_savedval;
	copy[1] = (uint8_t)(kp->kp_savedval >> 8);
}

bool
kinst_isa_arm(struct kinst_probe *kp)
{

	return (kinst_isa_patch(kp, kp->kp_savedval, kinst_isa_bp(kp)));
}

bool
kinst_isa_disarm(struct kinst_probe *kp)
{

	return (kinst_isa_patch(kp, kinst_isa_bp(kp), kp->kp_savedval));
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
 * MOD_UNLOAD, after dtrace_unregister() (every probe disarmed and
 * destroyed): true once no thread is inside a trampoline, false if one
 * still is after KINST_QUIESCE_TRIES tenths of a second (see the top
 * comment).  Sleeps.
 */
bool
kinst_tramp_quiesce(void)
{
	int i;

	/* No CPU is still in kinst_invop() about to send a thread in. */
	dtrace_sync();
	for (i = 0; atomic_load_acq_int(&kinst_tramp_inflight) != 0; i++) {
		if (i == KINST_QUIESCE_TRIES)
			return (false);
		pause("kinstq", MAX(hz / 10, 1));
	}
	return (true);
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

/*
 * The dtrace_invop() hook, called by dtrace_invop_start() for an ebreak with
 * interrupts disabled.  dtrace_invop_start() leaves SEPC as set here when
 * it is given MATCH_C_NOP back.  No lock, no
 * allocation, no call into code that could itself be probed: the probe
 * comes from kinst.c's address chains, with what was derived when it was
 * made.
 */
int
kinst_invop(uintptr_t addr, struct trapframe *frame,
    uintptr_t scratch __unused)
{
	solaris_cpu_t *cpu;
	struct kinst_probe *kp;
	struct kinst_regs kr;
	uintptr_t resume;
	u_int state;
	int i;

	resume = kinst_tramp_resume(addr);
	if (resume != 0) {
		atomic_subtract_int(&kinst_tramp_inflight, 1);
		frame->tf_sepc = resume;
		return (KINST_ISA_NOP);
	}
	if ((kp = kinst_probe_at(addr)) == NULL)
		return (0);
	state = atomic_load_acq_int(&kp->kp_state);
	/*
	 * Disarmed, our instruction is back: a trap now can only be one taken
	 * just before, unless another provider has since put its own
	 * breakpoint here.
	 */
	if (state == KINST_S_IDLE || (state == KINST_S_DISARMED &&
	    kinst_isa_get(kp, kp->kp_patchpoint) == kinst_isa_bp(kp)))
		return (0);

	/* As stock riscv kinst: the caller is the probe's address. */
	if (kp->kp_id != 0) {
		cpu = &solaris_cpu[curcpu];
		cpu->cpu_dtrace_caller = addr;
		dtrace_probe(kp->kp_id, 0, 0, 0, 0, 0);
		cpu->cpu_dtrace_caller = 0;
	}

	if (kinst_core_is_emulated(&kp->kp_md)) {
		kr.kr_x[0] = 0;
		for (i = 1; i < 32; i++)
			kr.kr_x[i] = *kinst_isa_reg(frame, i);
		kr.kr_pc = addr;
		if (kinst_core_emulate(&kp->kp_md, addr, &kr) == 0) {
			for (i = 1; i < 32; i++)
				*kinst_isa_reg(frame, i) = kr.kr_x[i];
			frame->tf_sepc = kr.kr_pc;
			return (KINST_ISA_NOP);
		}
	} else if (kp->kp_tramp != NULL) {
		atomic_add_int(&kinst_tramp_inflight, 1);
		frame->tf_sepc = (uintptr_t)kp->kp_tramp;
		return (KINST_ISA_NOP);
	}

	/*
	 * Unreachable: an armed probe has its trampoline, and an emulated
	 * kind emulates.  As stock kinst does when it has no trampoline: put
	 * the instruction back and run it in place.  Nothing may be printed
	 * here.
	 */
	(void)kinst_isa_patch(kp, kinst_isa_bp(kp), kp->kp_savedval);
	atomic_store_rel_int(&kp->kp_state, KINST_S_DISARMED);
	frame->tf_sepc = addr;
	return (KINST_ISA_NOP);
}

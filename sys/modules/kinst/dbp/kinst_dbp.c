/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_dbp.c: the part of kinstkit's kinst provider that arm64 and riscv,
 * the "double breakpoint" ISAs, share behind the interface ../kinst.h
 * declares for every ISA: the breakpoint handler and reading, arming and
 * disarming a patch point.  What differs -- the trapframe, the store that
 * writes the text and the instruction-cache sync, the value handed back to
 * dtrace_invop_start() -- is <arch>/kinst_isa.c; what a trampoline is and
 * how threads are counted in and out of one is kinst_dbp_tramp.c, which
 * probe gets which trampoline slot ../kinst_tramp.c.
 *
 * A hit on a probe (the breakpoint at its patch point) fires the DTrace
 * probe and resumes one of two ways: kinst_core_emulate() runs the
 * instruction over the register file (every PC-relative class, and the
 * register branches, which would leave a trampoline without reaching its
 * breakpoint), or the thread goes to the probe's trampoline
 * [instruction][breakpoint] and the trampoline's breakpoint brings it back
 * to the instruction after the patch point.  The trampoline's breakpoint is
 * known by its address: each trampoline slot records where its thread
 * resumes.  So nothing ties the two breakpoints to a CPU or a thread -- a
 * thread may take an interrupt, be preempted, migrate or leave through an
 * exception while in a trampoline -- and the interrupt mask is never
 * touched (stock kinst masks interrupts from the first breakpoint to the
 * second and keeps the probe in per-CPU state; an instruction run in its
 * trampoline that reads or sets the mask sees or leaves the wrong one).
 *
 * A probe's breakpoint covers kinst_patchval_t: the arm64 word, the first
 * halfword of a riscv instruction.

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

#include <machine/atomic.h>
#include <machine/frame.h>

#include "kinst_core.h"
#include "kinst.h"
#include "kinst_dbp.h"

CTASSERT(KINST_PATCH_SIZE == sizeof(kinst_patchval_t));

/* What is at 'p', little-endian, as wide as a probe's breakpoint. */
kinst_patchval_t
kinst_isa_peek(const struct kinst_probe *kp __unused,
    const volatile uint8_t *p)
{

	return ((kinst_patchval_t)kinst_core_get(p, sizeof(kinst_patchval_t)));
}

/* kp's breakpoint, as kinst_isa_peek() reads it. */
static kinst_patchval_t
kinst_dbp_bp(const struct kinst_probe *kp)
{
	uint8_t bp[KINST_PATCH_SIZE];

	(void)kinst_core_patch(&kp->kp_md, bp);
	return (kinst_isa_peek(kp, bp));
}

/*
 * kinst_patch_tracepoint(): write 'val' over kp's patch point if it still
 * holds 'expect'.  false if it held something else, which is left.  Every
 * DTrace provider patches from its enable and disable callbacks, under
 * dtrace_lock, as ours do, so no other provider writes between the compare
 * and the write.
 */
static bool
kinst_dbp_patch(struct kinst_probe *kp, kinst_patchval_t expect,
    kinst_patchval_t val)
{

	if (kinst_isa_peek(kp, kp->kp_patchpoint) != expect)
		return (false);
	kinst_isa_write(kp->kp_patchpoint, val);
	return (true);
}

/* In a copy of kp's bytes: the original, if it is our breakpoint. */
void
kinst_isa_unpatch(const struct kinst_probe *kp, uint8_t *copy)
{

	if (kinst_isa_peek(kp, copy) == kinst_dbp_bp(kp))
		kinst_core_put(copy, kp->kp_savedval, sizeof(kinst_patchval_t));
}

bool
kinst_isa_arm(struct kinst_probe *kp)
{

	return (kinst_dbp_patch(kp, kp->kp_savedval, kinst_dbp_bp(kp)));
}

bool
kinst_isa_disarm(struct kinst_probe *kp)
{

	return (kinst_dbp_patch(kp, kinst_dbp_bp(kp), kp->kp_savedval));
}

/*
 * The dtrace_invop() hook, called by dtrace_invop_start() for a breakpoint
 * with interrupts disabled.  No lock, no allocation, no call into code that
 * could itself be probed: the probe comes from kinst.c's address chains,
 * with what was derived when it was made.
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

	resume = kinst_tramp_leave(addr);
	if (resume != 0)
		return (kinst_isa_resume(frame, resume));
	if ((kp = kinst_probe_at(addr)) == NULL)
		return (0);
	state = atomic_load_acq_int(&kp->kp_state);
	/*
	 * Disarmed, our instruction is back: a trap now can only be one taken
	 * just before, unless another provider has since put its own
	 * breakpoint here.
	 */
	if (state == KINST_S_IDLE || (state == KINST_S_DISARMED &&
	    kinst_isa_peek(kp, kp->kp_patchpoint) == kinst_dbp_bp(kp)))
		return (0);

	/* As stock arm64 and riscv kinst: the caller is the probe's address. */
	if (kp->kp_id != 0) {
		cpu = &solaris_cpu[curcpu];
		cpu->cpu_dtrace_caller = addr;
		dtrace_probe(kp->kp_id, 0, 0, 0, 0, 0);
		cpu->cpu_dtrace_caller = 0;
	}

	if (kinst_core_is_emulated(&kp->kp_md)) {
		kinst_isa_regs_in(frame, addr, &kr);
		if (kinst_core_emulate(&kp->kp_md, addr, &kr) == 0) {
			kinst_isa_regs_out(&kr, frame);
			return (kinst_isa_resume(frame, kr.kr_pc));
		}
	} else if (kp->kp_tramp != NULL) {
		kinst_tramp_enter();
		return (kinst_isa_resume(frame, (uintptr_t)kp->kp_tramp));
	}

	/*
	 * Unreachable: an armed probe has its trampoline, and an emulated
	 * kind emulates.  As stock kinst does when it has no trampoline: put
	 * the instruction back and run it in place.  Nothing may be printed
	 * here.
	 */
	(void)kinst_dbp_patch(kp, kinst_dbp_bp(kp), kp->kp_savedval);
	atomic_store_rel_int(&kp->kp_state, KINST_S_DISARMED);
	return (kinst_isa_resume(frame, addr));
}

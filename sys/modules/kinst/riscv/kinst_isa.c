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
 * The trampoline pages, and the count of threads inside them that makes
 * unload safe, are dbp/kinst_tramp.c, shared with the other double-
 * breakpoint ISA.
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
#include "kinst_tramp.h"

#if !defined(__riscv)
#error "this is the riscv part of the kinstkit kinst glue"
#endif

#define	KINST_ISA_NOP	0x0001		/* MATCH_C_NOP: SEPC stays as set */

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

/* A new trampoline page: a c.ebreak nobody answers in every halfword, so a stray jump traps. */
void
kinst_isa_tramp_page(uint8_t *page)
{
	u_int i;

	for (i = 0; i < PAGE_SIZE; i += KINST_INSN_C_SIZE)
		*(uint16_t *)(page + i) = KINST_PATCHVAL;
}

/* A filled trampoline, made visible to instruction fetch. */
void
kinst_isa_tramp_sync(uint8_t *tramp __unused, size_t len __unused)
{

	fence_i();
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

	resume = kinst_tramp_leave(addr);
	if (resume != 0) {
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
		kinst_tramp_enter();
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

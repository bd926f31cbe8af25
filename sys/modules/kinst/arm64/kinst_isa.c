/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_isa.c: the arm64 part of kinstkit's kinst provider: the breakpoint
 * handler (trapframe to struct kinst_regs and back), writing the brk word,
 * and the trampoline pages, behind the interface ../kinst.h declares for
 * every ISA.  The machine-independent rest is in ../kinst.c.
 *
 * A hit on a probe (brk #0x40d, DTRACE_PATCHVAL, at its patch point) fires
 * the DTrace probe and resumes one of two ways: kinst_core_emulate() runs
 * the instruction over the register file (every PC-relative class, and br,
 * blr and ret, which would leave a trampoline without reaching its brk), or
 * the thread goes to the probe's trampoline [instruction][brk #0x40d] and
 * the trampoline's brk brings it back to the instruction after the patch
 * point.  The trampoline's brk is known by its address: each trampoline
 * slot records where its thread resumes.  So nothing ties the two
 * breakpoints to a CPU or a thread -- a thread may take an interrupt, be
 * preempted, migrate or leave through an exception while in a trampoline --
 * and SPSR's interrupt mask is never touched (stock kinst masks interrupts
 * from the first brk to the second and keeps the probe in per-CPU state;
 * a "msr daifclr" or "mrs daif" run in its trampoline sees or makes the
 * wrong mask).
 *
 * Emulated writes go only to registers FreeBSD's return from an EL1
 * exception restores (x0-x17, x29, lr; the generator refuses the others),
 * and x30 lives in tf_lr, not tf_x[] (stock kinst indexes tf_x[30]).
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

#if !defined(__aarch64__)
#error "this is the arm64 part of the kinstkit kinst glue"
#endif

#define	KINST_ISA_NOP	0xd503201f	/* NOP_INSTR: ELR += 4 follows */

/* The little-endian word at 'p', at any alignment (a copy may be any). */
static uint32_t
kinst_isa_get(const volatile uint8_t *p)
{

	return ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24);
}

/* kp's breakpoint word. */
static uint32_t
kinst_isa_bp(const struct kinst_probe *kp)
{
	uint8_t bp[KINST_INSN_SIZE];

	(void)kinst_core_patch(&kp->kp_md, bp);
	return (kinst_isa_get(bp));
}

/*
 * kinst_patch_tracepoint(): write 'val' over kp's word if it still is
 * 'expect', through the kernel's writable alias of the text, then make the
 * instruction cache see it.  false if the word was something else and was
 * left.  Every DTrace provider patches from its enable and disable
 * callbacks, under dtrace_lock, as ours do, so no other provider writes
 * between the compare and the write.
 */
static bool
kinst_isa_patch(struct kinst_probe *kp, uint32_t expect, uint32_t val)
{
	vm_offset_t addr;

	if (*(volatile uint32_t *)kp->kp_patchpoint != expect)
		return (false);
	if (!arm64_get_writable_addr((vm_offset_t)kp->kp_patchpoint, &addr))
		panic("kinst: no writable address for %p", kp->kp_patchpoint);
	*(volatile uint32_t *)addr = val;
	cpu_icache_sync_range((vm_offset_t)kp->kp_patchpoint,
	    KINST_INSN_SIZE);
	return (true);
}

kinst_patchval_t
kinst_isa_peek(const struct kinst_probe *kp __unused,
    const volatile uint8_t *p)
{

	return (kinst_isa_get(p));
}

/* In a copy of kp's word: the original, if it is our brk. */
void
kinst_isa_unpatch(const struct kinst_probe *kp, uint8_t *copy)
{
	uint32_t v;
	int i;

	if (kinst_isa_get(copy) != kinst_isa_bp(kp))
		return;
	v = kp->kp_savedval;
	for (i = 0; i < KINST_INSN_SIZE; i++)
		copy[i] = (uint8_t)(v >> (8 * i));
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

/* A new trampoline page: a brk nobody answers in every word, so a stray jump traps. */
void
kinst_isa_tramp_page(uint8_t *page)
{
	u_int i;

	for (i = 0; i < PAGE_SIZE; i += KINST_INSN_SIZE)
		*(uint32_t *)(page + i) = KINST_PATCHVAL;
}

/* A filled trampoline, made visible to instruction fetch. */
void
kinst_isa_tramp_sync(uint8_t *tramp, size_t len)
{

	cpu_icache_sync_range((vm_offset_t)tramp, len);
}

/*
 * The dtrace_invop() hook, called by dtrace_invop_start() for a brk #0x40d
 * with interrupts disabled.  dtrace_invop_start() adds 4 to ELR for the
 * NOP_INSTR it is given back, so the ELR set here is 4 short.  No lock, no
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
		frame->tf_elr = resume - KINST_INSN_SIZE;
		return (KINST_ISA_NOP);
	}
	if ((kp = kinst_probe_at(addr)) == NULL)
		return (0);
	state = atomic_load_acq_int(&kp->kp_state);
	/*
	 * Disarmed, our word is back: a trap now can only be one taken just
	 * before, unless another provider has since put its own brk here.
	 */
	if (state == KINST_S_IDLE || (state == KINST_S_DISARMED &&
	    kinst_isa_get(kp->kp_patchpoint) == kinst_isa_bp(kp)))
		return (0);

	/* As stock arm64 kinst: the caller is the probe's address. */
	if (kp->kp_id != 0) {
		cpu = &solaris_cpu[curcpu];
		cpu->cpu_dtrace_caller = addr;
		dtrace_probe(kp->kp_id, 0, 0, 0, 0, 0);
		cpu->cpu_dtrace_caller = 0;
	}

	if (kinst_core_is_emulated(&kp->kp_md)) {
		for (i = 0; i < 30; i++)
			kr.kr_x[i] = frame->tf_x[i];
		kr.kr_x[30] = frame->tf_lr;
		kr.kr_sp = frame->tf_sp;
		kr.kr_pc = addr;
		kr.kr_nzcv = frame->tf_spsr & 0xf0000000UL;
		if (kinst_core_emulate(&kp->kp_md, addr, &kr) == 0) {
			for (i = 0; i < 30; i++)
				frame->tf_x[i] = kr.kr_x[i];
			frame->tf_lr = kr.kr_x[30];
			frame->tf_elr = kr.kr_pc - KINST_INSN_SIZE;
			return (KINST_ISA_NOP);
		}
	} else if (kp->kp_tramp != NULL) {
		kinst_tramp_enter();
		frame->tf_elr = (uintptr_t)kp->kp_tramp - KINST_INSN_SIZE;
		return (KINST_ISA_NOP);
	}

	/*
	 * Unreachable: an armed probe has its trampoline, and an emulated
	 * kind emulates.  As stock kinst does when it has no trampoline: put
	 * the word back and run it in place.  Nothing may be printed here.
	 */
	(void)kinst_isa_patch(kp, kinst_isa_bp(kp), kp->kp_savedval);
	atomic_store_rel_int(&kp->kp_state, KINST_S_DISARMED);
	frame->tf_elr = addr - KINST_INSN_SIZE;
	return (KINST_ISA_NOP);
}

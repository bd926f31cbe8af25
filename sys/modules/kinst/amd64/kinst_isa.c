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
 * are refused by the generator anyway).  kinst_tramp.c gives out the slots;
 * this file maps their pages and says what a slot holds.
 *
 * Unload keeps the pages, deliberately, and the next load reuses them.
 * #BP returns with the interrupted code's PSL_I, so a thread can be
 * preempted with %rip inside a trampoline, and a trampolined instruction
 * can fault and sleep; dtrace_sync() waits only for CPUs in probe context,
 * not for such threads, and no cheap quiescence point proves that none is
 * left (a trampoline can be left by its jmp back, but also by a taken
 * branch, a ret or an exception, so threads cannot be counted out).
 * Unmapping would make such a thread fault when it resumes, so the pages
 * stay mapped, their contents valid, after kldunload (KINST_TRAMP_KEEP in
 * kinst_isa.h), and kinst_tramp.c hands the pool to the next load of this
 * module: a probe made again at an address gets the very slot it had, and
 * new ones take slots never filled.  A load cycle maps no page the last one
 * mapped.  Nor does unload wait for such threads (kinst_tramp_quiesce()):
 * a trampoline here ends in a jmp back to the instruction after the patch
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
 * mapping of a trampoline is ever both writable and executable.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/linker.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/pcpu.h>

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

/*
 * A page above KERNBASE, read and execute only, and its direct-map alias,
 * where kinst_tramp.c writes it.  May sleep; NULL when the kernel map is
 * full.  Never freed (KINST_TRAMP_KEEP): see the comment at the top.
 */
uint8_t *
kinst_isa_tpage_alloc(uint8_t **write)
{
	vm_offset_t addr;

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
	pmap_protect(kernel_pmap, addr, addr + PAGE_SIZE,
	    VM_PROT_READ | VM_PROT_EXECUTE);
	*write = (uint8_t *)PHYS_TO_DMAP(pmap_kextract(addr));
	return ((uint8_t *)addr);
}

/* Calls are emulated; everything else runs in a trampoline. */
bool
kinst_isa_tramp_needed(const struct kinst_probe *kp)
{

	return (!kinst_core_is_call(&kp->kp_md));
}

/*
 * The instruction, its rel32 rewritten for where the trampoline runs, then
 * jmp *0(%rip) back to the instruction after the patch point.
 */
const char *
kinst_isa_tramp_fill(const struct kinst_probe *kp, uintptr_t tramp,
    uint8_t *buf, uintptr_t *resume)
{

	if (kinst_core_tramp_fill(&kp->kp_md, (uintptr_t)kp->kp_patchpoint,
	    tramp, buf) != 0)
		return ("its trampoline cannot reach the instruction's "
		    "target (beyond +-2 GiB)");
	*resume = (uintptr_t)kp->kp_patchpoint + kp->kp_md.km_instlen;
	return (NULL);
}

/*
 * Nothing to do: x86 instruction fetch sees stores (here through the
 * direct map), and the CPU that takes a probe's #BP runs iretq, which
 * serializes, before it fetches from the slot the enable filled.
 */
void
kinst_isa_tramp_sync(uint8_t *tramp __unused, size_t len __unused)
{
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

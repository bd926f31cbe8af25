/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_isa.c: the amd64 part of kinstkit's kinst provider: the breakpoint
 * handler (trapframe to struct kinst_regs and back), writing the breakpoint
 * byte, and the trampoline pages.  The machine-independent rest is in
 * ../kinst.c.
 *
 * Trampolines are static and per probe, not per thread and per CPU as in
 * stock amd64 kinst, which rewrites a shared trampoline on every hit because
 * the rel32 fix-up depends on where the trampoline is.  There, a thread
 * interrupted or faulting inside its trampoline resumes into whatever the
 * trampoline holds by then, and code running on the same thread in between
 * (a fault handler, a preemption with interrupts enabled) may have hit
 * another probe and refilled it.  Here each trampoline is filled once, at
 * probe creation, for one instruction at one address, before the probe can
 * be enabled, and is never written again.  Any number of CPUs and threads
 * may run, be interrupted in, be preempted in or sleep in the same
 * trampoline: there is no per-hit state, nested hits use other trampolines,
 * and the interrupt flag is the interrupted code's own (popf and sti are
 * refused by the generator anyway).  A trampoline outlives its probe: it is
 * reused only for the same entry at the same address, that is with the same
 * contents, and trampoline pages are released only at unload, after
 * dtrace_unregister() (no probe left, none enabled), dtrace_invop_remove()
 * and dtrace_sync().  The remaining window, which stock kinst shares for its
 * per-thread trampolines, is a thread still asleep inside a trampoline when
 * the module is unloaded.
 *
 * Trampoline pages are mapped above KERNBASE, in the kernel's top 2 GiB like
 * the kernel text and every module (trampoline.c does the same), so that the
 * rewritten rel32 of a RIP-relative instruction reaches its target;
 * kinst_core_tramp_fill() refuses the probe if it does not.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/linker.h>
#include <sys/lock.h>
#include <sys/malloc.h>
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

struct kinst_trampchunk {
	SLIST_ENTRY(kinst_trampchunk) tc_next;
	vm_offset_t	tc_addr;
	u_int		tc_used;	/* bytes handed out, from the start */
};

static SLIST_HEAD(, kinst_trampchunk) kinst_trampchunks =
    SLIST_HEAD_INITIALIZER(kinst_trampchunks);

/*
 * Trampoline memory: whole pages above KERNBASE, handed out 32 bytes at a
 * time and filled with int3 so that a stray jump traps cleanly.  Nothing is
 * returned before unload (see the comment at the top).  Called with
 * kinst_sx held.
 */
uint8_t *
kinst_tramp_alloc(void)
{
	struct kinst_trampchunk *tc;
	vm_offset_t addr;
	uint8_t *tramp;

	sx_assert(&kinst_sx, SA_XLOCKED);
	tc = SLIST_FIRST(&kinst_trampchunks);
	if (tc == NULL || tc->tc_used + KINST_TRAMP_SIZE > PAGE_SIZE) {
		addr = KERNBASE;
		if (vm_map_find(kernel_map, NULL, 0, &addr, PAGE_SIZE, 0,
		    VMFS_ANY_SPACE, VM_PROT_ALL, VM_PROT_ALL, 0) !=
		    KERN_SUCCESS)
			return (NULL);
		if (kmem_back(kernel_object, addr, PAGE_SIZE,
		    M_WAITOK | M_EXEC) != KERN_SUCCESS) {
			(void)vm_map_remove(kernel_map, addr, addr + PAGE_SIZE);
			return (NULL);
		}
		memset((void *)addr, KINST_PATCHVAL, PAGE_SIZE);
		tc = malloc(sizeof(*tc), M_KINST, M_WAITOK);
		tc->tc_addr = addr;
		tc->tc_used = 0;
		SLIST_INSERT_HEAD(&kinst_trampchunks, tc, tc_next);
	}
	tramp = (uint8_t *)(tc->tc_addr + tc->tc_used);
	tc->tc_used += KINST_TRAMP_SIZE;
	return (tramp);
}

void
kinst_tramp_free_all(void)
{
	struct kinst_trampchunk *tc;

	while ((tc = SLIST_FIRST(&kinst_trampchunks)) != NULL) {
		SLIST_REMOVE_HEAD(&kinst_trampchunks, tc_next);
		kmem_unback(kernel_object, tc->tc_addr, PAGE_SIZE);
		(void)vm_map_remove(kernel_map, tc->tc_addr,
		    tc->tc_addr + PAGE_SIZE);
		free(tc, M_KINST);
	}
}

/* kinst_patch_tracepoint(): one byte, written with CR0.WP clear. */
void
kinst_patch(struct kinst_probe *kp, uint8_t val)
{
	register_t intr;
	bool old_wp;

	intr = intr_disable();
	old_wp = disable_wp();
	*kp->kp_patchpoint = val;
	restore_wp(old_wp);
	intr_restore(intr);
}

/*
 * The dtrace_invop() hook, called by dtrace_invop_start() with interrupts
 * disabled for every int3 in the kernel.  'addr' is the breakpoint's address
 * and 'scratch' a 16-byte slot from which bp_call pushes the return address
 * of an emulated call.  No lock, no allocation, no call into code that could
 * itself be probed.
 */
int
kinst_invop(uintptr_t addr, struct trapframe *frame, uintptr_t scratch)
{
	solaris_cpu_t *cpu;
	struct kinst_probe *kp;
	struct kinst_regs kr;
	uint64_t target, retaddr;
	uintptr_t *stack;
	long ndx;
	u_int state;

	ndx = kinst_core_lookup(&kinst_table, (uint64_t)addr - kinst_bias);
	if (ndx < 0)
		return (0);
	kp = (struct kinst_probe *)atomic_load_acq_ptr(
	    (volatile uintptr_t *)&kinst_probes[ndx]);
	if (kp == NULL)
		return (0);
	state = atomic_load_acq_int(&kp->kp_state);
	if (state == KINST_S_IDLE || (uintptr_t)kp->kp_patchpoint != addr)
		return (0);
	/*
	 * Disarmed, our byte is back: a trap now can only be one taken just
	 * before, unless another provider has since put its own int3 here.
	 */
	if (state == KINST_S_DISARMED && *kp->kp_patchpoint == KINST_PATCHVAL)
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

	if (kinst_core_is_call(kp->kp_entry)) {
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
		if (kinst_core_call(kp->kp_entry, addr, &kr, &target,
		    &retaddr) == 0) {
			*(uintptr_t *)scratch = retaddr;
			frame->tf_rip = (register_t)target;
			return (DTRACE_INVOP_CALL);
		}
	} else if (kp->kp_tramp != NULL) {
		frame->tf_rip = (register_t)kp->kp_tramp;
		return (DTRACE_INVOP_NOP);
	}

	/*
	 * Unreachable with a consistent table.  As stock kinst does when it
	 * has no trampoline: put the instruction back and run it in place.
	 * Nothing may be printed here.
	 */
	kinst_patch(kp, kp->kp_entry->ke_orig[0]);
	atomic_store_rel_int(&kp->kp_state, KINST_S_DISARMED);
	frame->tf_rip = (register_t)addr;
	return (DTRACE_INVOP_NOP);
}

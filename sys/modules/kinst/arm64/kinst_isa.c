/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_isa.c: the arm64 part of kinstkit's kinst provider: the trapframe
 * to struct kinst_regs and back, writing the brk word, and the
 * instruction-cache sync.  The breakpoint handler, arming and the
 * trampoline pages arm64 shares with riscv ("double breakpoint") are
 * ../dbp/; the machine-independent rest is ../kinst.c.
 *
 * A probe writes brk #0x40d (DTRACE_PATCHVAL) over its word, and its
 * trampoline is [word][brk #0x40d].  Emulated writes go only to registers
 * FreeBSD's return from an EL1 exception restores (x0-x17, x29, lr; the
 * generator refuses the others), and x30 lives in tf_lr, not tf_x[] (stock
 * kinst indexes tf_x[30]).
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
#include <machine/cpufunc.h>
#include <machine/frame.h>

#include "kinst_core.h"
#include "kinst.h"
#include "kinst_dbp.h"

#if !defined(__aarch64__)
#error "this is the arm64 part of the kinstkit kinst glue"
#endif

#define	KINST_ISA_NOP	0xd503201f	/* NOP_INSTR: ELR += 4 follows */

/*
 * Write 'val' over the word at 'patchpoint' through the kernel's writable
 * alias of the text, then make the instruction cache of every CPU see it
 * (cpu_icache_sync_range()'s ic ivau is broadcast to the inner-shareable
 * domain).  The store barrier first: kinst.c stores the probe's state with
 * release order just before, and release orders what comes before that
 * store, not the text store after it; without the barrier another CPU
 * could take the new brk and still find the probe idle (or its trampoline
 * unfilled) and pass the trap on as someone else's.
 */
void
kinst_isa_write(uint8_t *patchpoint, kinst_patchval_t val)
{
	vm_offset_t addr;

	if (!arm64_get_writable_addr((vm_offset_t)patchpoint, &addr))
		panic("kinst: no writable address for %p", patchpoint);
	dmb(ishst);
	*(volatile uint32_t *)addr = val;
	cpu_icache_sync_range((vm_offset_t)patchpoint, KINST_INSN_SIZE);
}

/* Filled trampoline bytes, made visible to instruction fetch. */
void
kinst_isa_tramp_sync(uint8_t *tramp, size_t len)
{

	cpu_icache_sync_range((vm_offset_t)tramp, len);
}

void
kinst_isa_regs_in(const struct trapframe *frame, uintptr_t addr,
    struct kinst_regs *kr)
{
	int i;

	for (i = 0; i < 30; i++)
		kr->kr_x[i] = frame->tf_x[i];
	kr->kr_x[30] = frame->tf_lr;
	kr->kr_sp = frame->tf_sp;
	kr->kr_pc = addr;
	kr->kr_nzcv = frame->tf_spsr & 0xf0000000UL;
}

void
kinst_isa_regs_out(const struct kinst_regs *kr, struct trapframe *frame)
{
	int i;

	for (i = 0; i < 30; i++)
		frame->tf_x[i] = kr->kr_x[i];
	frame->tf_lr = kr->kr_x[30];
}

/*
 * dtrace_invop_start() adds 4 to ELR for the NOP_INSTR it is given back,
 * so the ELR set here is 4 short.
 */
int
kinst_isa_resume(struct trapframe *frame, uintptr_t pc)
{

	frame->tf_elr = pc - KINST_INSN_SIZE;
	return (KINST_ISA_NOP);
}

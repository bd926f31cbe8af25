/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_isa.c: the riscv part of kinstkit's kinst provider: the trapframe
 * to struct kinst_regs and back, writing c.ebreak, and the
 * instruction-cache sync.  The breakpoint handler, arming and the
 * trampoline pages riscv shares with arm64 ("double breakpoint") are
 * ../dbp/; the machine-independent rest is ../kinst.c.
 *
 * A probe writes c.ebreak over the first halfword of its instruction,
 * compressed or not (stock kinst writes a 4-byte ebreak over a 4-byte
 * instruction, which at a 2-byte-aligned address takes two stores), and
 * its trampoline is [instruction][c.nop][ebreak].  Register numbers map to
 * the trapframe's named slots (x0 reads as zero and a write to it
 * vanishes: stock kinst writes an auipc with rd = x0 through offset -1).
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
#include <vm/pmap.h>
#include <vm/vm_extern.h>

#include <machine/cpufunc.h>
#include <machine/frame.h>

#include "kinst_core.h"
#include "kinst.h"
#include "kinst_dbp.h"

#if !defined(__riscv)
#error "this is the riscv part of the kinstkit kinst glue"
#endif

#define	KINST_ISA_NOP	0x0001		/* MATCH_C_NOP: SEPC stays as set */

/*
 * New text at [va, va + len) for every hart's instruction fetch: fence.i
 * is local to the hart that runs it, so this hart's, and then
 * pmap_sync_icache(), which fences and asks the SBI for a remote fence.i on
 * every other hart; without it another hart could go on running a stale
 * line (the filler c.ebreak of a trampoline page, and trap forever, or the
 * instruction a probe has just replaced).
 */
static void
kinst_isa_sync(uint8_t *va, size_t len)
{

	fence_i();
	pmap_sync_icache(kernel_pmap, (vm_offset_t)va, len);
}

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
 * Write 'val' over the first halfword of the instruction at 'patchpoint'.
 * One 16-bit store at a 2-byte-aligned address, so no hart ever fetches a
 * half-written instruction; the rest of a 4-byte instruction is never
 * written.  Before it a store barrier: kinst.c stores the probe's state
 * with release order just before, and release orders what comes before
 * that store, not the text store after it; without the barrier another
 * hart could take the new c.ebreak and still find the probe idle (or its
 * trampoline unfilled).  After it the instruction-cache sync of every hart
 * (kinst_isa_sync()).
 */
void
kinst_isa_write(uint8_t *patchpoint, kinst_patchval_t val)
{

	__asm __volatile("fence w,w" ::: "memory");
	*(volatile uint16_t *)patchpoint = val;
	kinst_isa_sync(patchpoint, sizeof(val));
}

/* Filled trampoline bytes, made visible to instruction fetch. */
void
kinst_isa_tramp_sync(uint8_t *tramp, size_t len)
{

	kinst_isa_sync(tramp, len);
}

void
kinst_isa_regs_in(const struct trapframe *frame, uintptr_t addr,
    struct kinst_regs *kr)
{
	int i;

	kr->kr_x[0] = 0;
	for (i = 1; i < 32; i++)
		kr->kr_x[i] = *kinst_isa_reg(__DECONST(struct trapframe *,
		    frame), i);
	kr->kr_pc = addr;
}

void
kinst_isa_regs_out(const struct kinst_regs *kr, struct trapframe *frame)
{
	int i;

	for (i = 1; i < 32; i++)
		*kinst_isa_reg(frame, i) = kr->kr_x[i];
}

/* dtrace_invop_start() leaves SEPC as set here for MATCH_C_NOP. */
int
kinst_isa_resume(struct trapframe *frame, uintptr_t pc)
{

	frame->tf_sepc = pc;
	return (KINST_ISA_NOP);
}

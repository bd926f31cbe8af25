/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_isa.h: what the double-breakpoint harness glue (../dbp/kinst_harness.c)
 * needs of arm64 Linux: raw system calls, and the signal frame's registers
 * mapped onto the core's struct kinst_regs.
 */

#ifndef _KH_ISA_H_
#define	_KH_ISA_H_

#define	KH_ISA_NAME	"arm64"

static long
kh_syscall4(long nr, long a1, long a2, long a3, long a4)
{
	register long x8 __asm__("x8") = nr;
	register long x0 __asm__("x0") = a1;
	register long x1 __asm__("x1") = a2;
	register long x2 __asm__("x2") = a3;
	register long x3 __asm__("x3") = a4;

	__asm__ volatile("svc #0"
	    : "+r" (x0)
	    : "r" (x8), "r" (x1), "r" (x2), "r" (x3)
	    : "memory");
	return (x0);
}

static uintptr_t
kh_uc_pc(const ucontext_t *uc)
{

	return ((uintptr_t)uc->uc_mcontext.pc);
}

static void
kh_uc_set_pc(ucontext_t *uc, uintptr_t pc)
{

	uc->uc_mcontext.pc = pc;
}

/* x0-x30, sp, pc and NZCV (pstate bits 31-28) from the signal frame. */
static void
kh_regs_in(const ucontext_t *uc, struct kinst_regs *kr)
{
	int i;

	for (i = 0; i < 31; i++)
		kr->kr_x[i] = uc->uc_mcontext.regs[i];
	kr->kr_sp = uc->uc_mcontext.sp;
	kr->kr_pc = uc->uc_mcontext.pc;
	kr->kr_nzcv = uc->uc_mcontext.pstate & 0xf0000000UL;
}

/* What an emulation may change: the general registers and pc. */
static void
kh_regs_out(const struct kinst_regs *kr, ucontext_t *uc)
{
	int i;

	for (i = 0; i < 31; i++)
		uc->uc_mcontext.regs[i] = kr->kr_x[i];
	uc->uc_mcontext.pc = kr->kr_pc;
}

#endif /* !_KH_ISA_H_ */

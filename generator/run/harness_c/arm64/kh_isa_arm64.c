/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_isa_arm64.c: what the harness glue needs of arm64 Linux besides the
 * double-breakpoint handler it shares with riscv (../dbp/kh_dbp.c): raw
 * system calls (../kh_isa.h), and the signal frame's registers mapped onto
 * the core's struct kinst_regs (../dbp/kh_dbp.h).
 */

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <ucontext.h>

#include "kinst_core.h"
#include "kh_isa.h"
#include "kh_dbp.h"

long
kh_isa_syscall4(long nr, long a1, long a2, long a3, long a4)
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

/* x0-x30, sp, pc and NZCV (pstate bits 31-28) from the signal frame. */
void
kh_dbp_regs_in(const ucontext_t *uc, struct kinst_regs *kr)
{
	int i;

	for (i = 0; i < 31; i++)
		kr->kr_x[i] = uc->uc_mcontext.regs[i];
	kr->kr_sp = uc->uc_mcontext.sp;
	kr->kr_pc = uc->uc_mcontext.pc;
	kr->kr_nzcv = uc->uc_mcontext.pstate & 0xf0000000UL;
}

/* What an emulation may change: the general registers and pc. */
void
kh_dbp_regs_out(const struct kinst_regs *kr, ucontext_t *uc)
{
	int i;

	for (i = 0; i < 31; i++)
		uc->uc_mcontext.regs[i] = kr->kr_x[i];
	uc->uc_mcontext.pc = kr->kr_pc;
}

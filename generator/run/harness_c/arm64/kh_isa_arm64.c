/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_isa_arm64.c: what the harness glue needs of arm64 Linux besides the
 * double-breakpoint handler it shares with riscv (../dbp/kh_dbp.c): the
 * signal frame's registers mapped onto the core's struct kinst_regs
 * (../dbp/kh_dbp.h); its system call convention is kh_syscall.h.
 */

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <ucontext.h>

#include "kinst_core.h"
#include "kh_isa.h"
#include "kh_dbp.h"

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

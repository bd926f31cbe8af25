/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_isa_riscv.c: what the harness glue needs of riscv64 Linux besides the
 * double-breakpoint handler it shares with arm64 (../dbp/kh_dbp.c): the
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

/* x1-x31 and pc from the signal frame (__gregs[0] is pc, [n] is xn). */
void
kh_dbp_regs_in(const ucontext_t *uc, struct kinst_regs *kr)
{
	int i;

	kr->kr_x[0] = 0;
	for (i = 1; i < 32; i++)
		kr->kr_x[i] = uc->uc_mcontext.__gregs[i];
	kr->kr_pc = uc->uc_mcontext.__gregs[REG_PC];
}

void
kh_dbp_regs_out(const struct kinst_regs *kr, ucontext_t *uc)
{
	int i;

	for (i = 1; i < 32; i++)
		uc->uc_mcontext.__gregs[i] = kr->kr_x[i];
	uc->uc_mcontext.__gregs[REG_PC] = kr->kr_pc;
}

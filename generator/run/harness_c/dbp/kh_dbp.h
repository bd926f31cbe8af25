/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_dbp.h: what the harness's double-breakpoint handler (dbp/kh_dbp.c,
 * arm64 and riscv) needs of <arch>/kh_isa_<arch>.c besides ../kh_isa.h:
 * the signal frame's registers mapped onto the core's struct kinst_regs,
 * pc included.  Include it after <ucontext.h> and kinst_core.h.
 */

#ifndef _KH_DBP_H_
#define	_KH_DBP_H_

void	kh_dbp_regs_in(const ucontext_t *, struct kinst_regs *);
void	kh_dbp_regs_out(const struct kinst_regs *, ucontext_t *);

#endif /* !_KH_DBP_H_ */

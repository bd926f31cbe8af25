/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_dbp.h: the FreeBSD glue of the "double breakpoint" ISAs (arm64,
 * riscv), inside: what dbp/kinst_dbp.c (the breakpoint handler, the
 * patching and the trampolines both ISAs share) and <arch>/kinst_isa.c
 * (what differs: the trapframe, the store that writes the text, the
 * instruction-cache sync) call of each other.
 * Between them they implement what ../kinst.h declares for an ISA part.
 * Include it after kinst.h.
 */

#ifndef _KINST_DBP_H_
#define	_KINST_DBP_H_

/* dbp/kinst_dbp.c, for the breakpoint handler */
void		kinst_tramp_enter(void);
uintptr_t	kinst_tramp_leave(uintptr_t);

/*
 * <arch>/kinst_isa.c.  kinst_isa_write(): store 'val' over the patch
 * point, ordered after every store before it (the probe's state, its
 * trampoline) and made visible to instruction fetch on every CPU (the same
 * for trampoline bytes is ../kinst.h's kinst_isa_tramp_sync()).
 * kinst_isa_resume(): where the thread that trapped goes on; returns what
 * kinst_invop() hands back to dtrace_invop_start().
 */
void	kinst_isa_write(uint8_t *, kinst_patchval_t);
void	kinst_isa_regs_in(const struct trapframe *, uintptr_t,
	    struct kinst_regs *);
void	kinst_isa_regs_out(const struct kinst_regs *, struct trapframe *);
int	kinst_isa_resume(struct trapframe *, uintptr_t);

#endif /* !_KINST_DBP_H_ */

/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_tramp.h: the trampolines of the "double breakpoint" ISAs (arm64,
 * riscv), shared by their kinst_isa.c files: dbp/kinst_tramp.c implements
 * kinst.h's kinst_tramp_*() for both, and these are what it and an ISA's
 * breakpoint handler call of each other.  Include it after kinst.h.
 */

#ifndef _KINST_TRAMP_H_
#define	_KINST_TRAMP_H_

/* dbp/kinst_tramp.c, for the breakpoint handler */
void		kinst_tramp_enter(void);
uintptr_t	kinst_tramp_leave(uintptr_t);

/* <arch>/kinst_isa.c, for kinst_tramp.c */
void		kinst_isa_tramp_page(uint8_t *);
void		kinst_isa_tramp_sync(uint8_t *, size_t);

#endif /* !_KINST_TRAMP_H_ */

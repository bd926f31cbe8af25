/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_isa.h: what the machine-independent kinst glue (../kinst.c) needs
 * to know of riscv, besides the functions ../kinst.h declares: the type of
 * what a probe saves and writes at its patch point.  kinst.h includes it.
 */

#ifndef _KINST_ISA_H_
#define	_KINST_ISA_H_

/*
 * A probe writes c.ebreak over the first halfword of its instruction, a
 * compressed one or not, and saves that halfword: one aligned 16-bit store
 * arms or disarms it atomically.
 */
typedef uint16_t	kinst_patchval_t;

/* What the console lines call the patched unit. */
#define	KINST_SITE_UNIT	"halfword"

#endif /* !_KINST_ISA_H_ */

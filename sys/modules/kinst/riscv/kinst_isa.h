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
 * A probe writes c.ebreak (2 bytes) over a compressed instruction and
 * ebreak (4 bytes) over any other, and saves the instruction: the low 16
 * bits of a kinst_patchval_t for a compressed one, all 32 otherwise.  How
 * wide a probe's values are is its kinst_md's km_instlen.
 */
typedef uint32_t	kinst_patchval_t;

/* What the console lines call the patched unit. */
#define	KINST_SITE_UNIT	"instruction"

#endif /* !_KINST_ISA_H_ */

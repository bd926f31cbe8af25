/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_isa.h: what the machine-independent kinst glue (../kinst.c) needs
 * to know of arm64, besides the functions ../kinst.h declares: the type of
 * what a probe saves and writes at its patch point.  kinst.h includes it.
 */

#ifndef _KINST_ISA_H_
#define	_KINST_ISA_H_

/*
 * A probe writes brk #0x40d (KINST_PATCHVAL, DTrace's patch value) over its
 * whole instruction word and saves the word.
 */
typedef uint32_t	kinst_patchval_t;

/* What the console lines call the patched unit. */
#define	KINST_SITE_UNIT	"word"

#endif /* !_KINST_ISA_H_ */

/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_isa.h: what the machine-independent kinst glue (../kinst.c) needs
 * to know of amd64, besides the functions ../kinst.h declares: the type of
 * what a probe saves and writes at its patch point.  kinst.h includes it.
 */

#ifndef _KINST_ISA_H_
#define	_KINST_ISA_H_

/*
 * A probe writes int3 (KINST_PATCHVAL, one byte) over the first byte of its
 * instruction and saves that byte.
 */
typedef uint8_t	kinst_patchval_t;

/*
 * Trampoline pages outlive the module and serve its next load: no thread
 * can be shown to have left them (see kinst_isa.c and ../kinst_tramp.c).
 */
#define	KINST_TRAMP_KEEP

/* What the console lines call the patched unit. */
#define	KINST_SITE_UNIT	"byte"

#endif /* !_KINST_ISA_H_ */

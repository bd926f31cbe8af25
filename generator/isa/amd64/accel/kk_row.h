/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * One function's result row of the native summary walk (kk_accel.c), as
 * kk_summary.c and generator/isa/amd64/native.py read it: instructions
 * (KK_DECLINED when the walk gives up), whether an instruction starts with
 * push %rbp, then a counter per kind code (fast.KIND_CODES, 1..10; the
 * walk leaves the trampoline's at 0, it is what remains) and the refused
 * count.
 */

#ifndef KK_ROW_H
#define	KK_ROW_H

#define	KK_ROW		16
#define	KK_ROW_N	0
#define	KK_ROW_FRAME	1
#define	KK_ROW_KIND(k)	(2 + (k))
#define	KK_ROW_REFUSED	15
#define	KK_DECLINED	0xffffffffu

#endif

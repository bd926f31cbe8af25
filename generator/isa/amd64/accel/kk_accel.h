/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * What the native summary walk (kk_accel.c) shares with kk_summary.c,
 * kk_json.c and generator/isa/amd64/native.py.
 *
 * One function's result row, as the walk writes it: instructions
 * (KK_DECLINED when the walk gives up), whether an instruction starts with
 * push %rbp, then a counter per kind code (fast.KIND_CODES, 1..10; the
 * walk leaves the trampoline's at 0, it is what remains) and the refused
 * count.
 */

#ifndef KK_ACCEL_H
#define	KK_ACCEL_H

#include <stddef.h>
#include <stdint.h>

#define	KK_ROW		16
#define	KK_ROW_N	0
#define	KK_ROW_FRAME	1
#define	KK_ROW_KIND(k)	(2 + (k))
#define	KK_ROW_REFUSED	15
#define	KK_DECLINED	0xffffffffu

/* The longest x86 instruction. */
#define	KK_MAXLEN	15

size_t	kk_insn_length(const uint8_t *, size_t, int *);
int	kk_walk_frame(const uint8_t *, size_t, int *);

#endif

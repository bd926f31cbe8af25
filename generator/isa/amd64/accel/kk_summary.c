/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * The end of each function's "probes --all --summary --json" line, from
 * "eligible" on, written from the summary walk's rows (kk_accel.h).  A small
 * library has thousands of functions, and formatting their lines in Python
 * cost more than walking them.  The format is generator/analysis/report.py's
 * summary_json_fields(); tests/toolchain/test_native_walk.py holds the two
 * equal.  The kind names come from kk_kinds.h, which native.py writes beside
 * the build from fast.KIND_CODES.
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kk_accel.h"
#include "kk_kinds.h"

/* Fixed text of one line's end, beside the kinds and the prologue reason. */
#define	KK_TAIL_FIXED	128

static char *
kk_puts(char *p, const char *s)
{
	size_t n;

	n = strlen(s);
	memcpy(p, s, n);
	return (p + n);
}

static char *
kk_putu(char *p, uint32_t v)
{
	char digits[10];
	int n;

	n = 0;
	do {
		digits[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	while (n > 0)
		*p++ = digits[--n];
	return (p);
}

/* The most bytes kk_summary_tails() writes for one function. */
size_t
kk_summary_tail_max(size_t prologue_len)
{
	size_t k, n;

	n = KK_TAIL_FIXED + prologue_len;
	for (k = 0; k < KK_NKINDS; k++)
		n += strlen(kk_kind_key[k]) + 11;
	return (n);
}

/*
 * For each of nfunc functions, the end of its line and a newline, or the
 * newline alone where the walk declined it.  The verdict is the prologue
 * rule's alone: rule_first asks for push %rbp as the first byte (buf at
 * start[k]), otherwise any instruction starting with it will do; an
 * ineligible function's reason is prologue, JSON-quoted.  Returns the bytes
 * written, or -1 when out is shorter than nfunc * kk_summary_tail_max().
 */
long
kk_summary_tails(const uint8_t *buf, size_t nfunc, const uint64_t *start,
    const uint32_t *rows, int rule_first, const char *prologue, char *out,
    size_t size)
{
	const uint32_t *row;
	char *p;
	size_t f, k, max;
	uint32_t n, ok, tramp, v;
	int any;

	max = kk_summary_tail_max(strlen(prologue));
	if (nfunc != 0 && size / nfunc < max)
		return (-1);
	p = out;
	for (f = 0; f < nfunc; f++) {
		row = rows + f * KK_ROW;
		n = row[KK_ROW_N];
		if (n == KK_DECLINED) {
			*p++ = '\n';
			continue;
		}
		if (rule_first ? buf[start[f]] != 0x55 : row[KK_ROW_FRAME] == 0) {
			p = kk_puts(p, "\"eligible\":false,\"reason\":");
			p = kk_puts(p, prologue);
			p = kk_puts(p, ",\"walk_error\":\"\",\"instructions\":");
			p = kk_putu(p, n);
			p = kk_puts(p, ",\"probes\":0,\"skipped\":");
			p = kk_putu(p, n);
			p = kk_puts(p, ",\"kinds\":{}}\n");
			continue;
		}
		ok = n - row[KK_ROW_REFUSED];
		p = kk_puts(p, "\"eligible\":true,\"reason\":\"\","
		    "\"walk_error\":\"\",\"instructions\":");
		p = kk_putu(p, n);
		p = kk_puts(p, ",\"probes\":");
		p = kk_putu(p, ok);
		p = kk_puts(p, ",\"skipped\":");
		p = kk_putu(p, row[KK_ROW_REFUSED]);
		p = kk_puts(p, ",\"kinds\":{");
		/* The walk does not count trampolines: they are what remains. */
		tramp = ok;
		for (k = 0; k < KK_NKINDS; k++)
			if (kk_kind_code[k] != KK_K_TRAMPOLINE)
				tramp -= row[KK_ROW_KIND(kk_kind_code[k])];
		any = 0;
		for (k = 0; k < KK_NKINDS; k++) {
			v = kk_kind_code[k] == KK_K_TRAMPOLINE ? tramp :
			    row[KK_ROW_KIND(kk_kind_code[k])];
			if (v == 0)
				continue;
			if (any++)
				*p++ = ',';
			p = kk_puts(p, kk_kind_key[k]);
			p = kk_putu(p, v);
		}
		p = kk_puts(p, "}}\n");
	}
	return ((long)(p - out));
}

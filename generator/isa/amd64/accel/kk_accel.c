/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * Native amd64 summary walk for "probes --all --summary": one table lookup
 * per instruction (kk_opmap.h, made from iced-x86 by opmap.py) instead of
 * a decoder call from Python.  It counts what generator/isa/amd64/fast.py's
 * summarise() counts, and gives up on anything the table does not cover:
 * the caller then asks iced-x86, and iced capstone.
 */

#include <stddef.h>
#include <stdint.h>

#include "kk_opmap.h"

#include "kk_accel.h"

/* The length of ModR/M, SIB and displacement at p[i]; too long past end. */
static size_t
kk_modrm_len(const uint8_t *p, size_t i, size_t end)
{
	unsigned modrm, mod, rm;
	size_t n;

	modrm = p[i];
	mod = modrm >> 6;
	rm = modrm & 7;
	n = 1;
	if (mod != 3 && rm == 4) {
		if (i + 1 >= end)
			return (KK_MAXLEN + 1);
		n++;
		if (mod == 0 && (p[i + 1] & 7) == 5)
			n += 4;
	}
	if (mod == 1)
		n += 1;
	else if (mod == 2 || (mod == 0 && rm == 5))
		n += 4;
	return (n);
}

static int
kk_is_prefix(unsigned b)
{

	return ((b & 0xf0) == 0x40 || b == 0xf0 || b == 0xf2 || b == 0xf3 ||
	    b == 0x66 || b == 0x67 || b == 0x26 || b == 0x2e || b == 0x36 ||
	    b == 0x3e || b == 0x64 || b == 0x65);
}

/* One instruction as the table sees it. */
struct kk_one {
	size_t		len;
	unsigned	attr;	/* the table's attribute byte (kk_opmap.h) */
	unsigned	map;	/* 0 one-byte, 1 0f, 2 0f 38, 3 0f 3a */
	unsigned	op;	/* the opcode byte */
	unsigned	modrm;	/* the byte after it */
	unsigned	seg;	/* an %fs or %gs prefix */
};

/* The instruction at p[off, limit) into *d; 0, or -1 to decline. */
static inline int
kk_one(const uint8_t *p, size_t off, size_t limit, struct kk_one *d)
{
	size_t i;
	unsigned b, map, modrm, pfx, rex, lock, seg, opsize, rep, attr;
	unsigned key, top;

	i = off;
	lock = seg = opsize = rep = rex = 0;
	for (;; i++) {
		if (i >= limit)
			return (-1);
		b = p[i];
		if (b == 0xf0)
			lock = 1;
		else if (b == 0xf2 || b == 0xf3)
			rep = b;
		else if (b == 0x66)
			opsize = 1;
		else if (b == 0x64 || b == 0x65)
			seg = 1;
		else if (b == 0x67)
			return (-1);
		else if (b != 0x26 && b != 0x2e && b != 0x36 && b != 0x3e)
			break;
	}
	if ((b & 0xf0) == 0x40) {
		rex = (b & 0x08) != 0 ? 2 : 1;
		if (++i >= limit)
			return (-1);
		b = p[i];
		if (kk_is_prefix(b))	/* a prefix after REX cancels it */
			return (-1);
	}
	/* The prefix classes of opmap.PFX. */
	pfx = rep == 0xf3 ? 2 : rep == 0xf2 ? 3 : opsize;
	if (opsize && rep)
		pfx += 2;
	map = 0;
	if (b == 0x0f) {
		if (++i >= limit)
			return (-1);
		b = p[i];
		map = 1;
		if (b == 0x38 || b == 0x3a) {
			map = b == 0x38 ? 2 : 3;
			if (++i >= limit)
				return (-1);
			b = p[i];
		} else if (b == 0x0f)
			return (-1);	/* 3DNow! */
	} else if (b == 0xc4 || b == 0xc5 || b == 0x62)
		return (-1);		/* VEX, EVEX */
	i++;
	key = (((map * 256 + b) * KK_NPFX + pfx) * KK_NREX + rex) * 2 + lock;
	modrm = i < limit ? p[i] : 0;
	top = kk_top[key];
	attr = (top & 0x8000) != 0 ?
	    kk_rows[top & 0x7fff][((modrm >> 3) & 7) * 9 +
	    (modrm >> 6 == 3 ? 1 + (modrm & 7) : 0)] : top;
	if ((attr & 0x0f) == KK_DECLINE)
		return (-1);
	if ((attr & KK_HAS_MODRM) != 0) {
		if (i >= limit)
			return (-1);
		i += kk_modrm_len(p, i, limit);
	}
	i += kk_imm_size[(attr >> 4) & 7];
	if (i - off > KK_MAXLEN || i > limit)
		return (-1);
	d->len = i - off;
	d->attr = attr;
	d->map = map;
	d->op = b;
	d->modrm = modrm;
	d->seg = seg;
	return (0);
}

/* Walk p[0, limit) into row[]; 0, or -1 to decline the function. */
static int
kk_walk(const uint8_t *p, size_t limit, uint32_t *row)
{
	struct kk_one d;
	size_t off;

	for (off = 0; off < limit; off += d.len, row[KK_ROW_N]++) {
		if (kk_one(p, off, limit, &d) != 0)
			return (-1);
		if (p[off] == 0x55)
			row[KK_ROW_FRAME] = 1;
		switch (d.attr & 0x0f) {
		case KK_TRAMP:
			break;
		case KK_MEMPLAIN:
			if ((d.attr & KK_HAS_MODRM) != 0 &&
			    (d.modrm & 0xc7) == 0x05)
				row[KK_ROW_KIND(KK_K_RIPREL)]++;
			break;
		case KK_CALLIND:
			if (d.modrm >> 6 == 3)
				row[KK_ROW_KIND(KK_K_CALL_REG)]++;
			else if (d.seg)	/* %fs:/%gs: call through memory */
				row[KK_ROW_REFUSED]++;
			else if ((d.modrm & 0xc7) == 0x05)
				row[KK_ROW_KIND(KK_K_CALL_RIPREL)]++;
			else
				row[KK_ROW_KIND(KK_K_CALL_MEM)]++;
			break;
		case KK_REFUSE:
			row[KK_ROW_REFUSED]++;
			break;
		default:
			row[KK_ROW_KIND(kk_fixed_kind[(d.attr & 0x0f) -
			    KK_FIXED_FIRST])]++;
			break;
		}
	}
	return (0);
}

/*
 * The length of the instruction at p[0, limit) by the table, 0 where it
 * declines; *relative says whether its operand is relative to its address
 * (a direct jmp, jcc, call, loop, jrcxz or xbegin), so that a disassembler
 * prints an address in it.
 */
size_t
kk_insn_length(const uint8_t *p, size_t limit, int *relative)
{
	struct kk_one d;

	if (kk_one(p, 0, limit, &d) != 0)
		return (0);
	*relative = d.map == 0 ? (d.op >= 0x70 && d.op <= 0x7f) ||
	    (d.op >= 0xe0 && d.op <= 0xe3) || d.op == 0xe8 || d.op == 0xe9 ||
	    d.op == 0xeb || (d.op == 0xc7 && d.modrm == 0xf8) :
	    d.map == 1 && d.op >= 0x80 && d.op <= 0x8f;
	return (d.len);
}

/* Whether an instruction of p[0, limit) starts with push %rbp; -1 to decline. */
int
kk_walk_frame(const uint8_t *p, size_t limit, int *frame)
{
	uint32_t row[KK_ROW] = { 0 };

	if (kk_walk(p, limit, row) != 0)
		return (-1);
	*frame = row[KK_ROW_FRAME] != 0;
	return (0);
}

/*
 * Summarise nfunc functions of buf: function k is buf[start[k],
 * start[k] + limit[k]).  rows[] receives KK_ROW counters per function and
 * must be zeroed by the caller.  Returns how many were declined.
 */
size_t
kk_summarise(const uint8_t *buf, size_t nfunc, const uint64_t *start,
    const uint64_t *limit, uint32_t *rows)
{
	size_t k, declined;
	uint32_t *row;

	declined = 0;
	for (k = 0; k < nfunc; k++) {
		row = rows + k * KK_ROW;
		if (kk_walk(buf + start[k], limit[k], row) != 0) {
			row[KK_ROW_N] = KK_DECLINED;
			declined++;
		}
	}
	return (declined);
}

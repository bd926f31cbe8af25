/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kk_walk.c: the riscv hooks of the double-breakpoint step
 * (../../accel/kk_dbp.h), which walks a function's 2- and 4-byte
 * instructions.
 *
 * What kinst makes of an instruction is kinst_core_dissect()'s, the
 * portable core's (the kernel's own rule); this file adds what needs
 * capstone's text, that the mnemonic is of the kind the core found and
 * that the offset or immediate it prints is the one the emulation will
 * use, and the prologue rules.  What spans instructions goes back to
 * Python: a load-reserved or store-conditional (kinst's LR/SC blocks) and
 * an access to a trap CSR (its regions).
 */

#include <string.h>

#include "kk_dbp.h"

#define	KK_IS(v, c)	(((v) & KINST_##c##_MASK) == KINST_##c##_MATCH)

const cs_arch kk_dbp_arch = CS_ARCH_RISCV;
const cs_mode kk_dbp_mode = (cs_mode)(CS_MODE_RISCV64 | CS_MODE_RISCVC);

/* Does the kind branch by an offset capstone prints, to a target? */
static int
kk_offset_kind(unsigned kind)
{

	return (kind == KINST_K_JAL || kind == KINST_K_BRANCH ||
	    kind == KINST_K_C_J || kind == KINST_K_C_BRANCH);
}

/*
 * The number capstone prints after the last comma (decimal or 0x hex,
 * maybe negative), as Python's int(text, 0) reads it; 0: none.
 */
static int
kk_last_operand(const char *ops, int64_t *v)
{
	const char *s;
	uint64_t x;
	int neg, digits;

	s = strrchr(ops, ',');
	s = s == NULL ? ops : s + 1;
	while (*s == ' ')
		s++;
	neg = *s == '-';
	if (*s == '-' || *s == '+')
		s++;
	x = 0;
	digits = 0;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
		for (s += 2; *s != '\0' && *s != ' '; s++, digits++) {
			if (*s >= '0' && *s <= '9')
				x = x * 16 + (uint64_t)(*s - '0');
			else if (*s >= 'a' && *s <= 'f')
				x = x * 16 + (uint64_t)(*s - 'a' + 10);
			else if (*s >= 'A' && *s <= 'F')
				x = x * 16 + (uint64_t)(*s - 'A' + 10);
			else
				return (0);
		}
	} else {
		if (s[0] == '0' && s[1] >= '0' && s[1] <= '9')
			return (0);	/* int("012", 0) refuses it */
		for (; *s >= '0' && *s <= '9'; s++, digits++)
			x = x * 10 + (uint64_t)(*s - '0');
	}
	while (*s == ' ')
		s++;
	if (digits == 0 || *s != '\0')
		return (0);
	*v = neg ? -(int64_t)x : (int64_t)x;
	return (1);
}

/*
 * Does capstone see the instruction the way the core does: the kind's
 * mnemonic, none of an emulated kind for one the core copies or refuses,
 * and the offset (auipc: the immediate) the emulation uses?
 */
int
kk_dbp_agrees(const struct kinst_md *md, int rf, uint64_t address,
    const char *mnemonic, const char *ops)
{
	const char *const *names;
	int64_t v;
	unsigned kind;

	(void)address;	/* capstone prints offsets */
	kind = rf != 0 ? KINST_K_TRAMPOLINE : md->km_kind;
	names = kk_dbp_mnemonics(kind);
	if (names != NULL && !kk_dbp_among(mnemonic, names))
		return (0);
	if (names == NULL)
		return (!kk_dbp_any_kind(mnemonic));
	if (kk_offset_kind(kind))
		return (kk_last_operand(ops, &v) && v == md->km_imm);
	if (kind == KINST_K_AUIPC) {
		if (!kk_last_operand(ops, &v))
			v = 0;
		return (((uint64_t)v & 0xfffff) == md->km_insn >> 12);
	}
	return (1);
}

/* The row of an instruction the core refused with 'rf' (0: none). */
void
kk_dbp_verdict(struct kk_row *row, int rf, uint64_t address)
{

	row->kr_reason = (uint8_t)rf;
	row->kr_flags = KK_R_CACHEABLE;	/* capstone prints offsets */
	if (rf == 0 && kk_offset_kind(row->kr_md.km_kind)) {
		row->kr_target = address + (uint64_t)row->kr_md.km_imm;
		row->kr_flags |= KK_R_TARGET;
	}
}

/* Does the instruction need the whole function's context (Python's)? */
int
kk_dbp_context(const uint8_t *p, size_t len)
{
	static const uint32_t csrs[] = KINST_TRAP_CSRS;
	uint32_t v;
	unsigned i;

	if (len != KINST_INSN_SIZE)
		return (0);
	v = kinst_core_get(p, (int)len);
	if (KK_IS(v, LR_W) || KK_IS(v, LR_D) || KK_IS(v, SC_W) ||
	    KK_IS(v, SC_D))
		return (1);
	if ((v & 0x7f) != KINST_OP_SYSTEM || ((v >> 12) & 7) == 0)
		return (0);
	for (i = 0; i < KINST_TRAP_CSRS_N; i++)
		if (v >> 20 == csrs[i])
			return (1);
	return (0);
}

/* The 32-bit little-endian value at code[p, len), zeros past len. */
static uint32_t
kk_word(const uint8_t *code, size_t len, size_t p)
{
	uint32_t v;
	int i;

	v = 0;
	for (i = 3; i >= 0; i--)
		v = v << 8 | (p + (size_t)i < len ? code[p + (size_t)i] : 0);
	return (v);
}

/*
 * kinst's prologue rules (kinst_make_probe()), over the function read as
 * 32-bit words from its start up to the end of its last instruction, the
 * last word running on into the bytes after the function as kinst reads
 * them (code[limit, len), zeros past that): bit 0 ("any"), some word is
 * sd ra, N(sp) or holds c.sdsp ra, N(sp) in a halfword; bit 1 ("first",
 * kinst's first riscv rule), that and a ret or c.ret the same way.  A
 * compressed match leaves kinst's word pointer on the halfword that
 * matched, so the words after it are read 2 bytes on.
 */
unsigned
kk_isa_prologue(const uint8_t *code, size_t len, size_t limit,
    const struct kk_row *rows, size_t n)
{
	size_t p, size, last;
	uint32_t w;
	int store, ret;

	(void)limit;
	if (n == 0)
		return (0);
	last = rows[n - 1].kr_off;
	w = kk_word(code, len, last);
	size = last + ((w & 3) != 3 || (w & 0x1f) == 0x1f ? 2 : 4);
	store = ret = 0;
	for (p = 0; p < size && !(store && ret); p += 4) {
		w = kk_word(code, len, p);
		if (KK_IS(w, SD_RA_SP))
			store = 1;
		else if (KK_IS(w & 0xffff, C_SDSP_RA) ||
		    KK_IS(w >> 16, C_SDSP_RA)) {
			store = 1;
			p += KK_IS(w & 0xffff, C_SDSP_RA) ? 0 : 2;
		} else if (KK_IS(w, RET))
			ret = 1;
		else if (KK_IS(w & 0xffff, C_RET) || KK_IS(w >> 16, C_RET)) {
			ret = 1;
			p += KK_IS(w & 0xffff, C_RET) ? 0 : 2;
		}
	}
	return ((store ? 1u : 0u) | (store && ret ? 2u : 0u));
}

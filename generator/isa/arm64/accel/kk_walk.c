/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kk_walk.c: the arm64 hooks of the double-breakpoint step
 * (../../accel/kk_dbp.h), which walks a function word by word.
 *
 * What kinst makes of a word is kinst_core_dissect()'s, the portable
 * core's (the kernel's own rule); this file adds what needs capstone's
 * text, that the mnemonic and the address it prints are the ones the
 * emulation will use, the reason code of a refusal that names a register,
 * and the prologue rule.  What spans words goes back to Python: a load- or
 * store-exclusive (kinst's LDX/STX blocks) and an access to an EL1
 * exception register (its regions).  generator/isa/arm64/walk.py hands it
 * its data.
 */

#include <string.h>

#include "kk_dbp.h"

#define	KK_IS(w, c)	(((w) & KINST_##c##_MASK) == KINST_##c##_MATCH)

const cs_arch kk_dbp_arch = CS_ARCH_ARM64;
const cs_mode kk_dbp_mode = CS_MODE_ARM;

/*
 * From walk.py (kk_arm64_init()): the first reason code of each KINST_RF_*
 * refusal, and what picks among its codes (KK_BY_*).
 */
#define	KK_BY_NONE	0
#define	KK_BY_REG	1	/* one code per register, x0-x31 */
#define	KK_BY_SYSREG	2	/* one per KINST_EXC_SYSREGS member */
#define	KK_NRF		32
static uint8_t kk_first[KK_NRF];
static uint8_t kk_by[KK_NRF];
static unsigned kk_nrf;

int
kk_arm64_init(const uint8_t *first, const uint8_t *by, unsigned n)
{

	if (n > KK_NRF)
		return (-1);
	memcpy(kk_first, first, n);
	memcpy(kk_by, by, n);
	kk_nrf = n;
	return (0);
}

/* The reason code of the core's refusal 'rf' of the word in 'md'. */
static unsigned
kk_reason(int rf, const struct kinst_md *md)
{
	static const uint32_t regs[] = KINST_EXC_SYSREGS;
	unsigned i;

	if (rf <= 0 || (unsigned)rf > kk_nrf)
		return (0);
	switch (kk_by[rf - 1]) {
	case KK_BY_REG:
		return (kk_first[rf - 1] + (md->km_reg & 31));
	case KK_BY_SYSREG:
		for (i = 0; i < KINST_EXC_SYSREGS_N; i++)
			if (((md->km_insn >> 5) & 0x7fff) == regs[i])
				return (kk_first[rf - 1] + i);
		return (0);
	default:
		return (kk_first[rf - 1]);
	}
}

/*
 * Is it capstone's mnemonic of a PC-relative word: any emulated kind's
 * (walk.py's MNEMONICS) but a literal load's, whose mnemonics other loads
 * share?
 */
static int
kk_pcrel(const char *mnemonic)
{

	return (kk_dbp_any_kind(mnemonic) &&
	    !kk_dbp_among(mnemonic, kk_dbp_mnemonics(KINST_K_LDR_LITERAL)));
}

/* The "#0x..." or "#-N" capstone prints last, as an address; 0: none. */
static int
kk_last_imm(const char *ops, uint64_t *v)
{
	const char *s;
	int neg;
	uint64_t x;

	if ((s = strrchr(ops, '#')) == NULL)
		return (0);
	s++;
	neg = *s == '-';
	s += neg;
	x = 0;
	if (s[0] == '0' && s[1] == 'x' && s[2] != '\0') {
		for (s += 2; *s != '\0'; s++) {
			if (*s >= '0' && *s <= '9')
				x = x * 16 + (uint64_t)(*s - '0');
			else if (*s >= 'a' && *s <= 'f')
				x = x * 16 + (uint64_t)(*s - 'a' + 10);
			else
				return (0);
		}
	} else {
		if (*s == '\0')
			return (0);
		for (; *s != '\0'; s++) {
			if (*s < '0' || *s > '9')
				return (0);
			x = x * 10 + (uint64_t)(*s - '0');
		}
	}
	*v = neg ? (uint64_t)0 - x : x;
	return (1);
}

/*
 * Does capstone see the word the way the core does: the kind's mnemonic,
 * no PC-relative mnemonic for a word the core copies, and the address the
 * emulation computes?
 */
int
kk_dbp_agrees(const struct kinst_md *md, int rf, uint64_t address,
    const char *mnemonic, const char *ops)
{
	const char *const *names;
	uint64_t want, got;
	unsigned kind;

	(void)rf;	/* a refused word's kind is still checked */
	kind = md->km_kind;
	names = kk_dbp_mnemonics(kind);
	if (kind == KINST_K_BCOND) {
		if (strncmp(mnemonic, "b.", 2) != 0 &&
		    strncmp(mnemonic, "bc.", 3) != 0)
			return (0);
	} else if (names != NULL) {
		if (!kk_dbp_among(mnemonic, names))
			return (0);
	} else if ((kk_pcrel(mnemonic) ||
	    strncmp(mnemonic, "b.", 2) == 0) && !KK_IS(md->km_insn, SVE_ADR))
		return (0);
	if (kind == KINST_K_TRAMPOLINE || kind == KINST_K_BR_REG ||
	    (kind == KINST_K_LDR_LITERAL && strcmp(mnemonic, "prfm") == 0))
		return (1);
	want = kind == KINST_K_ADRP ? (address & ~(uint64_t)0xfff) +
	    (uint64_t)md->km_imm : address + (uint64_t)md->km_imm;
	return (kk_last_imm(ops, &got) && got == want);
}

/* Is the kind a direct branch, whose target the row carries? */
static int
kk_branches(unsigned kind)
{

	return (kind == KINST_K_B || kind == KINST_K_BL ||
	    kind == KINST_K_BCOND || kind == KINST_K_CBZ ||
	    kind == KINST_K_TBZ);
}

/* The row of a word the core refused with 'rf' (0: none) at 'address'. */
void
kk_dbp_verdict(struct kk_row *row, int rf, uint64_t address)
{

	row->kr_reason = (uint8_t)kk_reason(rf, &row->kr_md);
	row->kr_class = row->kr_md.km_class;
	if (kk_branches(row->kr_md.km_kind)) {
		row->kr_target = address + (uint64_t)row->kr_md.km_imm;
		row->kr_flags = KK_R_TARGET;
	}
	/* capstone prints a PC-relative operand's address: not cacheable. */
	if (row->kr_md.km_kind == KINST_K_TRAMPOLINE ||
	    row->kr_md.km_kind == KINST_K_BR_REG)
		row->kr_flags |= KK_R_CACHEABLE;
}

/*
 * Does the word need the whole function's context (Python's)?  The core
 * refuses a load- or store-exclusive and an access to an EL1 exception
 * register by itself; Python refuses the regions around them.
 */
int
kk_dbp_context(const uint8_t *p, size_t len)
{
	struct kinst_md md;
	int rf;

	rf = kinst_core_dissect(p, (kc_uint32_t)len, &md);
	return (rf == KINST_RF_LDX_BLOCK || rf == KINST_RF_EXCEPTION_REGISTER);
}

/*
 * kinst's prologue rule (kinst_make_probe()), the same for both of
 * Isa.prologue_reasons' rules, over the words of code[0, limit): after an
 * optional leading BTI, a nop, or any stp x?, x?, [sp, #-N]! or
 * sub sp, sp, #N.
 */
unsigned
kk_isa_prologue(const uint8_t *code, size_t len, size_t limit,
    const struct kk_row *rows, size_t n)
{
	uint32_t w;
	size_t i, k, first;

	(void)len;
	first = 0;	/* the word a leading nop is: after a BTI, the 2nd */
	for (i = k = 0; i < n; i++) {
		if (rows[i].kr_off + KINST_INSN_SIZE > limit)
			continue;
		w = kinst_core_get(code + rows[i].kr_off, KINST_INSN_SIZE);
		if (k++ == first && first == 0 && KK_IS(w, BTI)) {
			first = 1;
			continue;
		}
		if (k - 1 == first && w == KINST_NOP)
			return (3);
		if (KK_IS(w, STP_PRE_64) && ((w >> 5) & 31) == 31)
			return (3);
		if (KK_IS(w, SUB_SP_IMM) && (w & 31) == 31 &&
		    ((w >> 5) & 31) == 31)
			return (3);
	}
	return (0);
}

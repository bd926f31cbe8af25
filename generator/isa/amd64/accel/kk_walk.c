/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kk_walk.c: the amd64 step of the analysis's walk (../../accel/kk_host.h).
 *
 * Where an instruction ends comes from capstone, the decoder of record
 * (the library its Python binding ships), or from kk_opmap.inc, a table
 * generator/isa/amd64/opmap.py derives from capstone: one lookup per
 * instruction where the table knows the encoding's length and the refusal
 * its mnemonic carries, and, for a summary or a table, the core's verdict
 * where that is the same for every instruction of the encoding.  What kinst makes of the instruction is
 * kinst_core_dissect()'s, the portable core's (the kernel's own rule);
 * this file adds what needs capstone's text: the refusals by mnemonic
 * (generator/isa/amd64/tables.py's REFUSED, handed over by kk_init()),
 * the check that capstone sees the same %rip-relative operand, and the
 * function-wide facts Python decides (undecodable bytes, the %gs regions,
 * a length decode.py corrects that the table does not know), which send
 * the whole function to Python (KK_DEFER).
 */

#include <stdlib.h>
#include <string.h>

#include <capstone/capstone.h>

#include "kk_host.h"
#include "kk_opmap.inc"

static unsigned long kk_decoded;	/* instructions capstone decoded here */

/* From tables.py (kk_amd64_init()). */
static unsigned kk_ss_reason;		/* SS_LOAD_REASON's code */
static int kk_prologue_opcode = -1;	/* push %rbp */
static const char *const *kk_fixed;	/* mnemonics decode.py re-sizes */
static unsigned kk_nfixed;

/* How many instructions capstone decoded for the walks: the tests check the table carries them. */
unsigned long
kk_amd64_decoded(void)
{

	return (kk_decoded);
}

void
kk_amd64_init(unsigned ss_reason, int prologue_opcode,
    const char *const *fixed, unsigned nfixed)
{

	kk_ss_reason = ss_reason;
	kk_prologue_opcode = prologue_opcode;
	kk_fixed = fixed;
	kk_nfixed = nfixed;
}

/* capstone for x86-64, in AT&T syntax (what tables.py's names are in). */
int
kk_isa_open(const struct kk_capstone *api, csh *cs)
{

	if (api->kcs_open(CS_ARCH_X86, CS_MODE_64, cs) != CS_ERR_OK ||
	    api->kcs_option(*cs, CS_OPT_SYNTAX, CS_OPT_SYNTAX_ATT) != CS_ERR_OK)
		return (-1);
	return (0);
}

/*
 * What a byte is where an instruction starts (kk_lead[]): a legacy prefix
 * (of which kind), REX, an escape to another opcode map, an encoding the
 * table does not hold (capstone decides), or 0, a one-byte opcode.  One
 * lookup a byte rather than a chain of compares.
 */
#define	KK_L_LOCK	0x01	/* f0 */
#define	KK_L_REP	0x02	/* f2, f3 */
#define	KK_L_OPSIZE	0x04	/* 66 */
#define	KK_L_SEG	0x08	/* 26 2e 36 3e 64 65 */
#define	KK_L_PREFIX	0x0f	/* the legacy prefixes the table is keyed on */
#define	KK_L_REX	0x10	/* 40-4f */
#define	KK_L_ESC	0x20	/* 0f: the two- and three-byte maps */
#define	KK_L_NONE	0x40	/* 67, VEX (c4, c5), EVEX (62): capstone */

static const unsigned char kk_lead[256] = {
	[0x26] = KK_L_SEG, [0x2e] = KK_L_SEG, [0x36] = KK_L_SEG,
	[0x3e] = KK_L_SEG, [0x64] = KK_L_SEG, [0x65] = KK_L_SEG,
	[0xf0] = KK_L_LOCK, [0xf2] = KK_L_REP, [0xf3] = KK_L_REP,
	[0x66] = KK_L_OPSIZE, [0x0f] = KK_L_ESC,
	[0x67] = KK_L_NONE, [0xc4] = KK_L_NONE, [0xc5] = KK_L_NONE,
	[0x62] = KK_L_NONE,
	[0x40] = KK_L_REX, [0x41] = KK_L_REX, [0x42] = KK_L_REX,
	[0x43] = KK_L_REX, [0x44] = KK_L_REX, [0x45] = KK_L_REX,
	[0x46] = KK_L_REX, [0x47] = KK_L_REX, [0x48] = KK_L_REX,
	[0x49] = KK_L_REX, [0x4a] = KK_L_REX, [0x4b] = KK_L_REX,
	[0x4c] = KK_L_REX, [0x4d] = KK_L_REX, [0x4e] = KK_L_REX,
	[0x4f] = KK_L_REX,
};

/*
 * What a ModR/M byte m says, one table entry each (kk_modrm[], kk_col[]):
 * how many bytes it and what it brings (SIB, displacement) take, less the
 * 4 of a displacement a SIB byte's base 5 asks for; the column of its form
 * in a kk_cells row (per reg field: memory, %rip-relative, register r/m
 * 0-7).
 */
#define	KK_M_LEN	0x07	/* ModR/M, SIB and displacement bytes */
#define	KK_M_SIB	0x08	/* a SIB byte follows */
#define	KK_M_SIB_DISP	0x10	/* ... whose base 5 brings a disp32 */

#define	KK_MOD(m)	((m) >> 6)
#define	KK_HAS_SIB(m)	(KK_MOD(m) != 3 && ((m) & 7) == 4)
#define	KK_MODRM(m)	(1 + KK_HAS_SIB(m) +				\
	(KK_MOD(m) == 1 ? 1 : KK_MOD(m) == 2 ||				\
	(KK_MOD(m) == 0 && ((m) & 7) == 5) ? 4 : 0) +			\
	(KK_HAS_SIB(m) ? KK_M_SIB : 0) +				\
	(KK_HAS_SIB(m) && KK_MOD(m) == 0 ? KK_M_SIB_DISP : 0))
#define	KK_COL(m)	(((m) >> 3 & 7) * (KK_CELLS / 8) +		\
	(KK_MOD(m) == 3 ? 2 + ((m) & 7) : ((m) & 0xc7) == 0x05))

#define	KK_4(f, m)	f(m), f((m) + 1), f((m) + 2), f((m) + 3)
#define	KK_16(f, m)	KK_4(f, m), KK_4(f, (m) + 4), KK_4(f, (m) + 8),	\
	KK_4(f, (m) + 12)
#define	KK_64(f, m)	KK_16(f, m), KK_16(f, (m) + 16),		\
	KK_16(f, (m) + 32), KK_16(f, (m) + 48)
#define	KK_256(f)	KK_64(f, 0), KK_64(f, 64), KK_64(f, 128),	\
	KK_64(f, 192)

static const unsigned char kk_modrm[256] = { KK_256(KK_MODRM) };
static const unsigned char kk_col[256] = { KK_256(KK_COL) };

/*
 * One instruction in the table: its length, and the attribute of its
 * encoding (kk_opmap.inc); 0 where the table does not know it (capstone
 * decides).  p[0, limit) holds it.
 */
static inline size_t
kk_table_length(const uint8_t *p, size_t limit, unsigned *attr)
{
	size_t i, n;
	unsigned a, b, c, m, map, modrm, pfx, rex, seen, rep, key, top;
	int extra;

	if (limit == 0)
		return (0);
	seen = rep = rex = pfx = 0;
	extra = 0;
	b = p[0];
	c = kk_lead[b];
	if ((c & KK_L_PREFIX) != 0) {
		for (i = 0; (c & KK_L_PREFIX) != 0; c = kk_lead[b]) {
			seen |= c;
			if (c == KK_L_REP)
				rep = b;
			if (++i >= limit)
				return (0);
			b = p[i];
		}
		/*
		 * The table's verdict holds for the prefixes a class is keyed
		 * on, each once (opmap.py's probes); with others the core
		 * decides.
		 */
		extra = i != (seen & KK_L_LOCK) + ((seen & KK_L_REP) != 0) +
		    ((seen & KK_L_OPSIZE) != 0);
		/* The prefix classes of opmap.PFX. */
		pfx = rep == 0xf3 ? 2 : rep == 0xf2 ? 3 :
		    (seen & KK_L_OPSIZE) != 0;
		if ((seen & KK_L_OPSIZE) != 0 && rep != 0)
			pfx += 2;
	} else
		i = 0;
	if ((c & KK_L_REX) != 0) {
		rex = (b & 0x08) != 0 ? 2 : 1;
		if (++i >= limit)
			return (0);
		b = p[i];
		c = kk_lead[b];
		/* A prefix after REX cancels it: capstone decides. */
		if ((c & (KK_L_PREFIX | KK_L_REX)) != 0)
			return (0);
	}
	if ((c & KK_L_NONE) != 0)
		return (0);
	map = 0;
	if ((c & KK_L_ESC) != 0) {
		if (++i >= limit)
			return (0);
		b = p[i];
		map = 1;
		if (b == 0x38 || b == 0x3a) {
			map = b == 0x38 ? 2 : 3;
			if (++i >= limit)
				return (0);
			b = p[i];
		} else if (b == 0x0f)
			return (0);	/* 3DNow! */
	}
	i++;
	key = (((map * 256 + b) * KK_NPFX + pfx) * KK_NREX + rex) * 2 +
	    (seen & KK_L_LOCK);
	modrm = i < limit ? p[i] : 0;
	top = kk_top[key];
	/* A cell per reg field and form of the ModR/M byte. */
	a = (top & KK_ROW) != 0 ? kk_cells[top & ~KK_ROW][kk_col[modrm]] : top;
	if ((a & KK_KNOWN) == 0)
		return (0);
	if (extra)
		a &= ~KK_VERDICT;
	if ((a & KK_HAS_MODRM) != 0) {
		if (i >= limit)
			return (0);
		m = kk_modrm[modrm];
		if ((m & KK_M_SIB) != 0) {
			if (i + 1 >= limit)
				return (0);
			if ((m & KK_M_SIB_DISP) != 0 && (p[i + 1] & 7) == 5)
				i += 4;
		}
		i += m & KK_M_LEN;
	}
	n = i + kk_imm_size[a & KK_IMM];
	*attr = a;
	return (n > KINST_MAX_INSN || n > limit ? 0 : n);
}

/*
 * The operands' %rip-relative displacement must be the one
 * kinst_core_dissect() read from the ModR/M operand: 0 when it is not, or
 * when the text is not one this reads with certainty (Python then says
 * which).
 */
static int
kk_cross_check(const char *ops, int rip_modrm, long long disp)
{
	const char *at, *r, *e, *s;
	long long v;
	int neg;

	at = strstr(ops, "(%rip)");
	r = strstr(ops, "(%eip)");
	if (at == NULL || (r != NULL && r < at))
		at = r;
	if (at == NULL)
		return (!rip_modrm);
	if (!rip_modrm)
		return (0);
	e = at;
	for (s = e; s > ops && strchr("0123456789abcdef", s[-1]) != NULL; s--)
		;
	if (s - ops >= 2 && s[-1] == 'x' && s[-2] == '0' && s < e) {
		neg = s - ops >= 3 && s[-3] == '-';
		for (v = 0; s < e; s++)
			v = v * 16 + (*s <= '9' ? *s - '0' : *s - 'a' + 10);
	} else {
		for (s = e; s > ops && s[-1] >= '0' && s[-1] <= '9'; s--)
			;
		if (s < e && strchr("abcdef", e[-1]) != NULL)
			return (0);
		neg = s > ops && s[-1] == '-';
		for (v = 0; s < e; s++)
			v = v * 10 + (*s - '0');
	}
	return ((neg ? -v : v) == disp);
}

/*
 * Whether capstone's operands may name an address, so that the same bytes
 * elsewhere print differently: capstone prints a relative branch's target
 * as a bare number (hex, or decimal below 10).  Any operand that is a bare
 * number says yes (an absolute memory operand too, which costs only a
 * cache entry); a displacement before its parenthesis, an immediate ($)
 * and a register do not.
 */
static int
kk_prints_address(const char *ops)
{
	const char *p;
	int depth;

	for (p = ops; *p != '\0';) {
		if (*p == '*')
			p++;
		if (*p == '-')
			p++;
		if (*p >= '0' && *p <= '9') {
			while ((*p >= '0' && *p <= '9') ||
			    (*p >= 'a' && *p <= 'f') || *p == 'x')
				p++;
			if (*p != '(')
				return (1);
		}
		/* On to the next operand, past any parenthesis. */
		for (depth = 0; *p != '\0' && (*p != ',' || depth > 0); p++)
			depth += (*p == '(') - (*p == ')');
		if (*p == ',')
			for (p++; *p == ' '; p++)
				;
	}
	return (0);
}

static int
kk_ends(const char *s, const char *suffix)
{
	size_t n, m;

	n = strlen(s);
	m = strlen(suffix);
	return (n >= m && strcmp(s + n - m, suffix) == 0);
}

/* The last word of a mnemonic ("rep stosq", "notrack jmpq"). */
static const char *
kk_base(const char *mnemonic)
{
	const char *sp;

	sp = strrchr(mnemonic, ' ');
	return (sp == NULL ? mnemonic : sp + 1);
}

/* Kinds whose row holds a direct target (KK_R_TARGET). */
static inline int
kk_has_target(unsigned kind)
{

	return (kind == KINST_K_JMP32 || kind == KINST_K_JCC32 ||
	    kind == KINST_K_JMP_WIDEN || kind == KINST_K_JCC_WIDEN ||
	    kind == KINST_K_CALL_DIRECT);
}

/* Kinds with a %rip-relative operand (the core's km_disp, km_dispoff). */
static inline int
kk_is_riprel(unsigned kind)
{

	return (kind == KINST_K_RIPREL || kind == KINST_K_CALL_RIPREL);
}

/*
 * The row of b[0, len) at 'address' whose reason code by mnemonic is
 * 'named' (0: none): kinst_core_dissect()'s metadata, the refusal (the
 * mnemonic's, else the core's), and a direct branch's target.  KK_NEXT, or
 * KK_ERROR for bytes the core cannot read.
 */
static int
kk_row_of(const uint8_t *b, size_t len, uint64_t address, unsigned named,
    struct kk_row *row)
{
	int rc;

	row->kr_len = (uint8_t)len;
	row->kr_flags = KK_R_CACHEABLE;
	row->kr_class = 0;
	row->kr_cache = 0;
	row->kr_target = 0;
	row->kr_text = KK_NO_TEXT;
	rc = kinst_core_dissect(b, (kc_uint32_t)len, &row->kr_md);
	if (rc < 0)
		return (KK_ERROR);
	row->kr_reason = (uint8_t)(named != 0 ? named : (unsigned)rc);
	row->kr_target = kinst_core_branch_target(&row->kr_md, address);
	if (kk_has_target(row->kr_md.km_kind))
		row->kr_flags = KK_R_TARGET;
	return (KK_NEXT);
}

/*
 * The reason code of a refusal by capstone's mnemonic, or 0: its last word
 * among tables.py's REFUSED, or a load of %ss (which shadows the next
 * instruction: in a trampoline, the jump back).  opmap.py asks this too.
 */
unsigned
kk_amd64_named(const char *mnemonic, const char *operands)
{
	const char *base;
	unsigned named;

	base = kk_base(mnemonic);
	named = kk_name_reason(base);
	if (named == 0 && strncmp(base, "mov", 3) == 0 &&
	    kk_ends(operands, ", %ss"))
		named = kk_ss_reason;
	return (named);
}

/*
 * For opmap.py: kk_row_of()'s verdict on b[0, len) whose reason by
 * mnemonic is 'named': its kind and reason, or -1.
 */
int
kk_amd64_verdict(const uint8_t *b, size_t len, unsigned named,
    unsigned *kind, unsigned *reason)
{
	struct kk_row row;

	if (kk_row_of(b, len, 0, named, &row) != KK_NEXT)
		return (-1);
	*kind = row.kr_md.km_kind;
	*reason = row.kr_reason;
	return (0);
}

/*
 * The row of b[0, len) at 'address' with capstone's text for it, which
 * must agree with the core's %rip-relative operand: KK_NEXT, or KK_ERROR
 * (Python re-classifies it, and says what disagrees).
 */
int
kk_isa_classify(const uint8_t *b, size_t len, uint64_t address,
    const char *mnemonic, const char *operands, struct kk_row *row)
{
	const char *base;
	unsigned named;
	int rip;

	base = kk_base(mnemonic);
	named = kk_amd64_named(mnemonic, operands);
	if (kk_row_of(b, len, address, named, row) != KK_NEXT)
		return (KK_ERROR);
	rip = kk_is_riprel(row->kr_md.km_kind);
	if ((rip || strstr(operands, "ip)") != NULL) &&
	    !kk_cross_check(operands, rip, row->kr_md.km_disp))
		return (KK_ERROR);
	if ((row->kr_flags & KK_R_CACHEABLE) != 0 &&
	    kk_prints_address(operands))
		row->kr_flags &= ~KK_R_CACHEABLE;
	row->kr_text = kk_text_add(mnemonic, operands, base);
	return (KK_NEXT);
}

static int
kk_is_fixed(const char *mnemonic)
{
	unsigned i;

	for (i = 0; i < kk_nfixed; i++)
		if (strcmp(mnemonic, kk_fixed[i]) == 0)
			return (1);
	return (0);
}

/*
 * The step where the table's verdict alone does not do (kk_isa_step()'s
 * rare path): the core's rule with the table's length and refusal, a row
 * cached by its bytes, or capstone.  Out of line, so that the common path
 * needs few registers.
 */
static int KK_NOINLINE
kk_step_slow(const struct kk_fn *fn, size_t off, size_t tlen, unsigned attr,
    struct kk_row *row)
{
	const cs_insn *insn;
	const uint8_t *p;
	int text;

	p = fn->kn_code + off;
	text = fn->kn_text;
	if (tlen != 0 && text != KK_TEXT_ALL) {
		/* The table's length and refusal by name; the core's rule. */
		if (kk_row_of(p, tlen, fn->kn_address + off,
		    attr >> KK_REASON_SHIFT, row) == KK_NEXT &&
		    (text == KK_TEXT_NONE || row->kr_reason == 0)) {
			row->kr_off = (uint32_t)off;
			return (KK_NEXT);
		}
	} else if (tlen != 0 && kk_cache_get(p, tlen, 1, row)) {
		row->kr_off = (uint32_t)off;
		return (KK_NEXT);
	}
	/* capstone: text, or what the table does not know. */
	kk_decoded++;
	if ((insn = kk_decode(fn->kn_code, fn->kn_len, off,
	    fn->kn_address)) == NULL || kk_ends(insn->op_str, "%gs") ||
	    strncmp(insn->mnemonic, "lgs", 3) == 0)
		return (KK_DEFER);
	if (kk_is_fixed(insn->mnemonic)) {
		/*
		 * capstone's length is wrong; the table's is decode.py's
		 * correction (opmap.py), and capstone's text is what Python
		 * prints with it.
		 */
		if (tlen == 0)
			return (KK_DEFER);
		return (kk_decoded_row(fn->kn_code, off, tlen, fn->kn_address,
		    text, 0, insn->mnemonic, insn->op_str, row));
	}
	/* Kept by its bytes where the table reads the same length. */
	return (kk_decoded_row(fn->kn_code, off, insn->size, fn->kn_address,
	    text, tlen == insn->size, insn->mnemonic, insn->op_str, row));
}

/* The ISA's step (kk_host.h). */
int
kk_isa_step(const struct kk_fn *fn, size_t off, struct kk_row *row)
{
	size_t tlen;
	unsigned attr;

	attr = 0;	/* unset where the table does not know the encoding */
	tlen = kk_table_length(fn->kn_code + off, fn->kn_limit - off, &attr);
	if (tlen != 0 && fn->kn_text != KK_TEXT_ALL &&
	    (attr & KK_VERDICT) != 0 && (fn->kn_text == KK_TEXT_NONE ||
	    ((attr >> KK_REASON_SHIFT) == 0 &&
	    !kk_is_riprel((attr & KK_KIND) >> KK_KIND_SHIFT) &&
	    !kk_has_target((attr & KK_KIND) >> KK_KIND_SHIFT)))) {
		/*
		 * The core's verdict on every instruction of the class, as
		 * opmap.py found it, and no metadata: a summary needs none;
		 * a table and the jump proof a %rip-relative operand's place
		 * and a direct branch's target, which the core says.
		 */
		row->kr_off = (uint32_t)off;
		row->kr_len = (uint8_t)tlen;
		row->kr_reason = (uint8_t)(attr >> KK_REASON_SHIFT);
		row->kr_md.km_kind = (uint8_t)((attr & KK_KIND) >>
		    KK_KIND_SHIFT);
		row->kr_md.km_dispoff = 0;
		row->kr_flags = 0;
		row->kr_text = KK_NO_TEXT;
		row->kr_cache = 0;
		return (KK_NEXT);
	}
	return (kk_step_slow(fn, off, tlen, attr, row));
}

/*
 * The prologue rules a function passes, from its rows: bit 0 (tables.py's
 * PROLOGUE_RULES "any"), some instruction starts with push %rbp; bit 1
 * ("first", kinst 14.0), the first one does.
 */
unsigned
kk_isa_prologue(const uint8_t *code, size_t len, size_t limit,
    const struct kk_row *rows, size_t n)
{
	size_t i;

	(void)len;
	if (limit > 0 && code[0] == kk_prologue_opcode)
		return (3);
	for (i = 0; i < n; i++)
		if (code[rows[i].kr_off] == kk_prologue_opcode)
			return (1);
	return (0);
}

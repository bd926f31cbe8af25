/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core.c: kinst's rule for one word (kinst_core_dissect(), which
 * the kernel runs on the live word and the analysis on the host), the
 * table's word records, the trampoline fill and the emulation of every
 * PC-relative and register-branch class over a register file, for arm64;
 * the rest of the core is ../dbp/kinst_core_dbp.c.  Freestanding C99, no
 * headers, no library calls: the kernel glue runs the trap-time part in
 * probe context and the user-space harness in a SIGTRAP handler, and
 * neither may call into code that could itself be probed (kinst's
 * kinst_memcpy() rule).  The encodings it tests and the immediate
 * fields it reads (kinst_core_imm()) are kinst_encoding.h's, rendered from
 * generator/isa/arm64/tables.py.
 *
 * The classes are kinst's (sys/cddl/dev/kinst/aarch64/kinst_isa.c), with
 * the corrections docs/refusals.md lists: br, blr and ret are emulated;
 * adr, adrp and ldr (literal) are emulated into the registers FreeBSD's
 * EL1 exception return restores; cbz and cbnz on a W register compare 32
 * bits; tbz and tbnz test any of the 64 bits; x30 and xzr are registers
 * of their own; exception-generating words, BTI landing pads and accesses
 * to the EL1 exception registers are refused.
 */

#include "kinst_core.h"

#define	KINST_NONE		0xff	/* km_reg, km_cond, km_bit: not used */
#define	KINST_XZR		31
#define	KINST_RESTORED(r)	((KINST_WRITABLE_REGS >> (r) & 1) != 0)

/* A record byte: its code in the low bits, and the masked bit. */
int
kinst_core_record_byte(kc_uint8_t b, kc_uint8_t *len)
{

	*len = KINST_INSN_SIZE;
	if ((b & ~(KINST_R_CODE | KINST_R_MASKED)) != 0)
		return (-1);
	return (b & KINST_R_CODE);
}

#define	KINST_IS(w, c)	(((w) & KINST_##c##_MASK) == KINST_##c##_MATCH)

/* Is the word an MRS or MSR of an EL1 exception register? */
static int
kinst_core_exc_sysreg(kc_uint32_t w)
{
	static const kc_uint32_t regs[] = KINST_EXC_SYSREGS;
	int i;

	if (!KINST_IS(w, MRS) && !KINST_IS(w, MSR))
		return (0);
	for (i = 0; i < KINST_EXC_SYSREGS_N; i++)
		if (((w >> 5) & 0x7fff) == regs[i])
			return (1);
	return (0);
}

/*
 * A word kinst copies into its trampoline (enum kinst_instr's COMMON):
 * kinstkit emulates br, blr and ret, and refuses what cannot run in a
 * trampoline or must not trap.
 */
static int
kinst_core_common(kc_uint32_t w, struct kinst_md *md)
{

	if (KINST_IS(w, BRANCH_REG)) {
		if (!KINST_IS(w, BR) && !KINST_IS(w, BLR) && !KINST_IS(w, RET))
			return (KINST_RF_BRANCH_REG);
		md->km_kind = KINST_K_BR_REG;
		md->km_reg = (w >> 5) & 31;
		if (KINST_IS(w, BLR))
			md->km_flags = KINST_MD_LINK;
		return (0);
	}
	if (KINST_IS(w, EXCEPTION) || KINST_IS(w, UDF))
		return (KINST_RF_EXCEPTION);
	if (KINST_IS(w, BTI) || KINST_IS(w, PACIXSP))
		return (KINST_RF_BTI);
	if (kinst_core_exc_sysreg(w))
		return (KINST_RF_EXCEPTION_REGISTER);
	return (0);
}

/* ldr (literal): emulated into a register the exception return restores. */
static int
kinst_core_literal(kc_uint32_t w, struct kinst_md *md)
{
	kc_uint32_t opc;

	md->km_kind = KINST_K_LDR_LITERAL;
	if (((w >> 26) & 1) != 0) {
		md->km_reg = w & 31;
		return (KINST_RF_LDR_LITERAL_SIMD);	/* SIMD&FP */
	}
	opc = w >> 30;
	if (opc == 3)
		return (0);			/* prfm: loads nothing */
	md->km_reg = w & 31;
	md->km_size = opc == 1 ? 8 : 4;
	md->km_flags = opc == 2 ? KINST_MD_SIGNED : 0;
	return (KINST_RESTORED(md->km_reg) ? 0 : KINST_RF_LDR_LITERAL_CALLEE_SAVED);
}

/*
 * The class of the word 'w' and its fields but the immediate, or why it
 * cannot be probed (a KINST_RF_* code; the fields are still filled).
 */
static int
kinst_core_class(kc_uint32_t w, struct kinst_md *md)
{

	if (KINST_IS(w, ADR)) {
		md->km_class = KINST_C_ADR;
		md->km_kind = (w >> 31) != 0 ? KINST_K_ADRP : KINST_K_ADR;
		md->km_reg = w & 31;
		return (KINST_RESTORED(md->km_reg) ? 0 :
		    KINST_RF_ADR_CALLEE_SAVED);
	}
	if (KINST_IS(w, B) || KINST_IS(w, BL)) {
		md->km_class = KINST_IS(w, B) ? KINST_C_B : KINST_C_BL;
		md->km_kind = KINST_IS(w, B) ? KINST_K_B : KINST_K_BL;
		md->km_flags = KINST_IS(w, B) ? 0 : KINST_MD_LINK;
		return (0);
	}
	if (KINST_IS(w, BCOND)) {
		md->km_class = KINST_C_BCOND;
		md->km_kind = KINST_K_BCOND;
		md->km_cond = w & 15;
		return (0);
	}
	if (KINST_IS(w, CBZ) || KINST_IS(w, TBZ)) {
		md->km_class = KINST_IS(w, CBZ) ? KINST_C_CBZ : KINST_C_TBZ;
		md->km_kind = KINST_IS(w, CBZ) ? KINST_K_CBZ : KINST_K_TBZ;
		md->km_reg = w & 31;
		md->km_flags = ((w >> 24) & 1) != 0 ? KINST_MD_NONZERO : 0;
		if (md->km_kind == KINST_K_CBZ)
			md->km_size = (w >> 31) != 0 ? 8 : 4;
		else
			md->km_bit = (kc_uint8_t)((w >> 31) << 5 |
			    ((w >> 19) & 31));
		return (0);
	}
	if (KINST_IS(w, LDX) || KINST_IS(w, STX)) {
		md->km_class = KINST_IS(w, LDX) ? KINST_C_LDX : KINST_C_STX;
		return (KINST_RF_LDX_BLOCK);
	}
	if (KINST_IS(w, LDR_LITERAL)) {
		md->km_class = KINST_C_LDR_LITERAL;
		return (kinst_core_literal(w, md));
	}
	md->km_class = KINST_C_COMMON;
	return (kinst_core_common(w, md));
}

/*
 * kinst's rule for the word at b[0, len): its class, how a hit on it
 * resumes and what the emulation needs (kinst_instr_dissect() of
 * aarch64/kinst_isa.c, with kinstkit's corrections), or why it cannot be
 * probed at all.  0, a KINST_RF_* code (the metadata is still filled), or
 * -1 when 'len' is not a word.  The analysis runs this on the host; the
 * kernel on the live word (kinst_core_derive()).
 */
int
kinst_core_dissect(const volatile kc_uint8_t *b, kc_uint32_t len,
    struct kinst_md *md)
{
	kc_uint32_t w;
	int rc;

	if (len != KINST_INSN_SIZE)
		return (-1);
	w = kinst_core_get(b, KINST_INSN_SIZE);
	md->km_insn = w;
	md->km_kind = KINST_K_TRAMPOLINE;
	md->km_reg = md->km_cond = md->km_bit = KINST_NONE;
	md->km_size = 0;
	md->km_flags = 0;
	rc = kinst_core_class(w, md);
	md->km_imm = kinst_core_imm(w, md->km_kind);
	return (rc);
}

/* The length the word at 'b' announces: always a word. */
int
kinst_core_length(const volatile kc_uint8_t *b)
{

	(void)b;
	return (KINST_INSN_SIZE);
}

/*
 * Fill a KINST_TRAMP_SIZE trampoline: the word, then the trampoline's own
 * breakpoint, which the glue recognises by its address.  The caller syncs
 * the instruction caches.
 */
int
kinst_core_tramp_fill(const struct kinst_md *md, volatile kc_uint8_t *tramp)
{

	if (kinst_core_is_emulated(md))
		return (KINST_E_KIND);
	kinst_core_put(tramp, md->km_insn, KINST_INSN_SIZE);
	kinst_core_put(tramp + KINST_INSN_SIZE, KINST_PATCHVAL,
	    KINST_INSN_SIZE);
	return (0);
}

/* Where a thread resumes after the trampoline of the word at 'patchpoint'. */
kc_uintptr_t
kinst_core_resume(const struct kinst_md *md, kc_uintptr_t patchpoint)
{

	(void)md;
	return (patchpoint + KINST_INSN_SIZE);
}

static kc_uint64_t
kinst_core_x(const struct kinst_regs *kr, int reg)
{

	return (reg == KINST_XZR ? 0 : kr->kr_x[reg]);
}

static void
kinst_core_setx(struct kinst_regs *kr, int reg, kc_uint64_t v)
{

	if (reg != KINST_XZR)
		kr->kr_x[reg] = v;
}

/* ConditionHolds() of the Arm ARM over N, Z, C, V in bits 31-28. */
static int
kinst_core_cond(kc_uint64_t nzcv, kc_uint8_t cond)
{
	int n, z, c, v, res;

	n = (nzcv >> 31) & 1;
	z = (nzcv >> 30) & 1;
	c = (nzcv >> 29) & 1;
	v = (nzcv >> 28) & 1;
	switch (cond >> 1) {
	case 0:
		res = z;
		break;
	case 1:
		res = c;
		break;
	case 2:
		res = n;
		break;
	case 3:
		res = v;
		break;
	case 4:
		res = c && !z;
		break;
	case 5:
		res = n == v;
		break;
	case 6:
		res = n == v && !z;
		break;
	default:
		res = 1;
		break;
	}
	if ((cond & 1) != 0 && cond != 15)
		res = !res;
	return (res);
}

static kc_uint64_t
kinst_core_load(kc_uint64_t addr, int size)
{
	const volatile kc_uint8_t *p;
	kc_uint64_t v;
	int i;

	p = (const volatile kc_uint8_t *)(kc_uintptr_t)addr;
	v = 0;
	for (i = size - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return (v);
}

/*
 * Emulate the word at 'patchpoint' over 'kr': the registers it writes and
 * kr_pc, the address the thread goes on at.  Register operands have their
 * values at the breakpoint, which is what the word itself would have used.
 */
int
kinst_core_emulate(const struct kinst_md *md, kc_uintptr_t patchpoint,
    struct kinst_regs *kr)
{
	kc_uint64_t pc, next, v, target;
	int taken;

	pc = patchpoint;
	next = pc + KINST_INSN_SIZE;
	target = pc + (kc_uint64_t)md->km_imm;
	switch (md->km_kind) {
	case KINST_K_B:
		kr->kr_pc = target;
		return (0);
	case KINST_K_BL:
		kinst_core_setx(kr, 30, next);
		kr->kr_pc = target;
		return (0);
	case KINST_K_BCOND:
		kr->kr_pc = kinst_core_cond(kr->kr_nzcv, md->km_cond) ?
		    target : next;
		return (0);
	case KINST_K_CBZ:
		v = kinst_core_x(kr, md->km_reg);
		if (md->km_size == 4)
			v &= 0xffffffffU;
		taken = (md->km_flags & KINST_MD_NONZERO) != 0 ? v != 0 : v == 0;
		kr->kr_pc = taken ? target : next;
		return (0);
	case KINST_K_TBZ:
		v = (kinst_core_x(kr, md->km_reg) >> md->km_bit) & 1;
		taken = (md->km_flags & KINST_MD_NONZERO) != 0 ? v != 0 : v == 0;
		kr->kr_pc = taken ? target : next;
		return (0);
	case KINST_K_ADR:
		kinst_core_setx(kr, md->km_reg, target);
		kr->kr_pc = next;
		return (0);
	case KINST_K_ADRP:
		kinst_core_setx(kr, md->km_reg, (pc & ~(kc_uint64_t)0xfff) +
		    (kc_uint64_t)md->km_imm);
		kr->kr_pc = next;
		return (0);
	case KINST_K_LDR_LITERAL:
		if (md->km_size != 0) {
			v = kinst_core_load(target, md->km_size);
			if ((md->km_flags & KINST_MD_SIGNED) != 0)
				v = (kc_uint64_t)kinst_core_sext(v, 32);
			kinst_core_setx(kr, md->km_reg, v);
		}
		kr->kr_pc = next;
		return (0);
	case KINST_K_BR_REG:
		v = kinst_core_x(kr, md->km_reg);
		if ((md->km_flags & KINST_MD_LINK) != 0)
			kinst_core_setx(kr, 30, next);
		kr->kr_pc = v;
		return (0);
	default:
		return (KINST_E_KIND);
	}
}

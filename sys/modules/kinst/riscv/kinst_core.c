/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core.c: the table's instruction records, the emulation data
 * derived from the live instruction, the trampoline fill and the emulation
 * of every PC-relative and register-jump class over a register file, for
 * riscv.  Freestanding C99, no headers, no library calls: the kernel glue
 * runs the trap-time part in probe context and the user-space harness in a
 * SIGTRAP handler, and neither may call into code that could itself be
 * probed (kinst's kinst_memcpy() rule).  Hence byte loops.
 *
 * The classes are kinst's (sys/cddl/dev/kinst/riscv/kinst_isa.c), with the
 * correction generator/isa/riscv/classify.py makes and docs/refusals.md
 * lists: auipc with rd = x0 writes nothing.
 */

#include "kinst_core.h"

#define	KINST_NONE	0xff	/* km_rd, km_rs1, km_rs2, km_funct3: not used */
#define	KINST_EBREAK	0x00100073U

void
kinst_core_walk(const struct kinst_table *kt, const struct kinst_func *kf,
    struct kinst_walk *kw)
{

	kw->kw_p = kt->kt_records + kf->kf_records;
	kw->kw_end = kt->kt_records + kf->kf_end;
	kw->kw_off = 0;
	kw->kw_size = kf->kf_size;
	kw->kw_probe = kf->kf_first;
}

/*
 * The next instruction of the walk: 1, or 0 at the function's end, or
 * -KINST_E_TABLE for a record this core cannot read.
 */
int
kinst_core_next(struct kinst_walk *kw, struct kinst_insn *ki)
{
	kc_uint8_t b, code;

	if (kw->kw_off >= kw->kw_size || kw->kw_p >= kw->kw_end)
		return (0);
	b = *kw->kw_p++;
	code = (b >> KINST_R_CODE_SHIFT) & 15;
	if ((b & 0xc0) != 0 ||
	    (code >= KINST_NKINDS && code != KINST_R_REFUSED))
		return (-KINST_E_TABLE);
	ki->ki_len = (b & KINST_R_LONG) != 0 ? KINST_INSN_SIZE :
	    KINST_INSN_C_SIZE;
	ki->ki_kind = code;
	ki->ki_masked = (b & KINST_R_MASKED) != 0;
	ki->ki_off = kw->kw_off;
	ki->ki_probe = code == KINST_R_REFUSED ? 0 : kw->kw_probe++;
	kw->kw_off += ki->ki_len;
	return (1);
}

/*
 * Is 'copy', a writable copy of the live function's kf_size bytes, the
 * function the table was made from?  The relocated instructions are zeroed
 * first, as the generator zeroed them.  0, KINST_E_BYTES or KINST_E_TABLE.
 */
int
kinst_core_digest_ok(const struct kinst_table *kt, const struct kinst_func *kf,
    kc_uint8_t *copy)
{
	struct kinst_walk kw;
	struct kinst_insn ki;
	kc_uint32_t i;
	int rv;

	kinst_core_walk(kt, kf, &kw);
	while ((rv = kinst_core_next(&kw, &ki)) > 0) {
		if (!ki.ki_masked)
			continue;
		if (ki.ki_off + ki.ki_len > kf->kf_size)
			return (KINST_E_TABLE);
		for (i = 0; i < ki.ki_len; i++)
			copy[ki.ki_off + i] = 0;
	}
	if (rv < 0)
		return (KINST_E_TABLE);
	return (kinst_func_digest_ok(kt, kf, copy) ? 0 : KINST_E_BYTES);
}

static kc_int64_t
kinst_core_sext(kc_uint64_t v, int bits)
{

	v &= ((kc_uint64_t)1 << bits) - 1;
	if ((v >> (bits - 1)) & 1)
		v |= ~(((kc_uint64_t)1 << bits) - 1);
	return ((kc_int64_t)v);
}

/* The kind a 4-byte instruction is emulated as, or KINST_K_TRAMPOLINE. */
static int
kinst_core_kind32(kc_uint32_t w)
{

	switch (w & 0x7f) {
	case 0x6f:
		return (KINST_K_JAL);
	case 0x67:
		return (KINST_K_JALR);
	case 0x63:
		return (KINST_K_BRANCH);
	case 0x17:
		return (KINST_K_AUIPC);
	default:
		return (KINST_K_TRAMPOLINE);
	}
}

/* The kind a 2-byte instruction is emulated as, or KINST_K_TRAMPOLINE. */
static int
kinst_core_kind16(kc_uint32_t h)
{

	switch (h & 0xe003) {
	case 0xa001:
		return (KINST_K_C_J);
	case 0xc001:
	case 0xe001:
		return (KINST_K_C_BRANCH);
	}
	if ((h & 0xe07f) == 0x8002 && ((h >> 7) & 31) != 0)
		return (KINST_K_C_JR);
	return (KINST_K_TRAMPOLINE);
}

static void
kinst_core_derive32(kc_uint32_t w, struct kinst_md *md)
{
	kc_uint64_t imm;

	switch (md->km_kind) {
	case KINST_K_JAL:
		md->km_rd = (w >> 7) & 31;
		imm = (kc_uint64_t)(w >> 31) << 20 | ((w >> 21) & 0x3ff) << 1 |
		    ((w >> 20) & 1) << 11 | ((w >> 12) & 0xff) << 12;
		md->km_imm = kinst_core_sext(imm, 21);
		break;
	case KINST_K_JALR:
		md->km_rd = (w >> 7) & 31;
		md->km_rs1 = (w >> 15) & 31;
		md->km_imm = kinst_core_sext(w >> 20, 12);
		break;
	case KINST_K_BRANCH:
		md->km_rs1 = (w >> 15) & 31;
		md->km_rs2 = (w >> 20) & 31;
		md->km_funct3 = (w >> 12) & 7;
		imm = (kc_uint64_t)(w >> 31) << 12 | ((w >> 25) & 0x3f) << 5 |
		    ((w >> 8) & 15) << 1 | ((w >> 7) & 1) << 11;
		md->km_imm = kinst_core_sext(imm, 13);
		break;
	case KINST_K_AUIPC:
		md->km_rd = (w >> 7) & 31;
		md->km_imm = kinst_core_sext(w & 0xfffff000U, 32);
		break;
	}
}

static void
kinst_core_derive16(kc_uint32_t h, struct kinst_md *md)
{
	kc_uint64_t imm;

	switch (md->km_kind) {
	case KINST_K_C_J:
		imm = ((h >> 12) & 1) << 11 | ((h >> 11) & 1) << 4 |
		    ((h >> 9) & 3) << 8 | ((h >> 8) & 1) << 10 |
		    ((h >> 7) & 1) << 6 | ((h >> 6) & 1) << 7 |
		    ((h >> 3) & 7) << 1 | ((h >> 2) & 1) << 5;
		md->km_imm = kinst_core_sext(imm, 12);
		break;
	case KINST_K_C_BRANCH:
		md->km_rs1 = 8 + ((h >> 7) & 7);
		md->km_funct3 = (h & 0xe003) == 0xe001 ? 1 : 0;
		imm = ((h >> 12) & 1) << 8 | ((h >> 10) & 3) << 3 |
		    ((h >> 5) & 3) << 6 | ((h >> 3) & 3) << 1 |
		    ((h >> 2) & 1) << 5;
		md->km_imm = kinst_core_sext(imm, 9);
		break;
	case KINST_K_C_JR:
		md->km_rs1 = (h >> 7) & 31;
		md->km_rd = ((h >> 12) & 1) != 0 ? 1 : 0;
		break;
	}
}

/*
 * The emulation data for the live instruction 'b' that record 'ki'
 * describes.  Its length and class must be the recorded ones.
 */
int
kinst_core_derive(const struct kinst_insn *ki, const volatile kc_uint8_t *b,
    struct kinst_md *md)
{
	kc_uint32_t v;
	int kind;

	if (ki->ki_kind >= KINST_NKINDS)
		return (KINST_E_TABLE);
	v = (kc_uint32_t)b[0] | (kc_uint32_t)b[1] << 8;
	if (((v & 3) == 3) != (ki->ki_len == KINST_INSN_SIZE))
		return (KINST_E_TABLE);
	if (ki->ki_len == KINST_INSN_SIZE) {
		if ((v & 0x1f) == 0x1f)
			return (KINST_E_TABLE);	/* 6 bytes or more */
		v |= (kc_uint32_t)b[2] << 16 | (kc_uint32_t)b[3] << 24;
		kind = kinst_core_kind32(v);
	} else
		kind = kinst_core_kind16(v);
	if (kind != ki->ki_kind)
		return (KINST_E_TABLE);
	md->km_insn = v;
	md->km_kind = ki->ki_kind;
	md->km_instlen = ki->ki_len;
	md->km_imm = 0;
	md->km_rd = md->km_rs1 = md->km_rs2 = md->km_funct3 = KINST_NONE;
	if (ki->ki_len == KINST_INSN_SIZE)
		kinst_core_derive32(v, md);
	else
		kinst_core_derive16(v, md);
	return (0);
}

int
kinst_core_is_emulated(const struct kinst_md *md)
{

	return (md->km_kind != KINST_K_TRAMPOLINE);
}

static void
kinst_core_put(volatile kc_uint8_t *p, kc_uint32_t v, int len)
{
	int i;

	for (i = 0; i < len; i++)
		p[i] = (kc_uint8_t)(v >> (8 * i));
}

/*
 * Fill a KINST_TRAMP_SIZE trampoline: the instruction, a c.nop after a
 * compressed one, then the trampoline's own ebreak at +4, which the glue
 * recognises by its address.  The caller runs fence.i.
 */
int
kinst_core_tramp_fill(const struct kinst_md *md, volatile kc_uint8_t *tramp)
{

	if (kinst_core_is_emulated(md))
		return (KINST_E_KIND);
	kinst_core_put(tramp, md->km_insn, md->km_instlen);
	if (md->km_instlen == KINST_INSN_C_SIZE)
		kinst_core_put(tramp + KINST_INSN_C_SIZE, KINST_C_NOP,
		    KINST_INSN_C_SIZE);
	kinst_core_put(tramp + KINST_INSN_SIZE, KINST_EBREAK, KINST_INSN_SIZE);
	return (0);
}

/*
 * The breakpoint for the probe in 'buf', and its length: c.ebreak over the
 * first halfword, whatever the instruction's length.  A 4-byte instruction
 * may sit at an address that is only 2-byte aligned (after a compressed
 * one), where a 4-byte ebreak would take two stores and a hart fetching
 * between them would run half of each; one aligned 16-bit store is atomic,
 * and the CPU, seeing a 16-bit encoding, traps without reading the rest.
 */
int
kinst_core_patch(const struct kinst_md *md, kc_uint8_t *buf)
{

	(void)md;
	kinst_core_put(buf, KINST_PATCHVAL, KINST_INSN_C_SIZE);
	return (KINST_INSN_C_SIZE);
}

/* Where a thread resumes after the trampoline of the instruction at 'patchpoint'. */
kc_uintptr_t
kinst_core_resume(const struct kinst_md *md, kc_uintptr_t patchpoint)
{

	return (patchpoint + md->km_instlen);
}

static kc_uint64_t
kinst_core_x(const struct kinst_regs *kr, int reg)
{

	return (reg == 0 ? 0 : kr->kr_x[reg & 31]);
}

static void
kinst_core_setx(struct kinst_regs *kr, int reg, kc_uint64_t v)
{

	if (reg != 0)
		kr->kr_x[reg & 31] = v;
}

static int
kinst_core_taken(kc_uint8_t funct3, kc_uint64_t a, kc_uint64_t b)
{

	switch (funct3) {
	case 0:
		return (a == b);
	case 1:
		return (a != b);
	case 4:
		return ((kc_int64_t)a < (kc_int64_t)b);
	case 5:
		return ((kc_int64_t)a >= (kc_int64_t)b);
	case 6:
		return (a < b);
	default:
		return (a >= b);
	}
}

/*
 * Emulate the instruction at 'patchpoint' over 'kr': the register it
 * writes and kr_pc, where the thread goes on.  Sources are read before the
 * destination is written (jalr ra, 0(ra); c.jalr ra).
 */
int
kinst_core_emulate(const struct kinst_md *md, kc_uintptr_t patchpoint,
    struct kinst_regs *kr)
{
	kc_uint64_t pc, next, target;

	pc = patchpoint;
	next = pc + md->km_instlen;
	target = pc + (kc_uint64_t)md->km_imm;
	switch (md->km_kind) {
	case KINST_K_JAL:
	case KINST_K_C_J:
		if (md->km_rd != KINST_NONE)
			kinst_core_setx(kr, md->km_rd, next);
		kr->kr_pc = target;
		return (0);
	case KINST_K_JALR:
		target = (kinst_core_x(kr, md->km_rs1) +
		    (kc_uint64_t)md->km_imm) & ~(kc_uint64_t)1;
		kinst_core_setx(kr, md->km_rd, next);
		kr->kr_pc = target;
		return (0);
	case KINST_K_C_JR:
		target = kinst_core_x(kr, md->km_rs1);
		kinst_core_setx(kr, md->km_rd, next);
		kr->kr_pc = target;
		return (0);
	case KINST_K_BRANCH:
		kr->kr_pc = kinst_core_taken(md->km_funct3,
		    kinst_core_x(kr, md->km_rs1),
		    kinst_core_x(kr, md->km_rs2)) ? target : next;
		return (0);
	case KINST_K_C_BRANCH:
		kr->kr_pc = kinst_core_taken(md->km_funct3,
		    kinst_core_x(kr, md->km_rs1), 0) ? target : next;
		return (0);
	case KINST_K_AUIPC:
		kinst_core_setx(kr, md->km_rd, target);
		kr->kr_pc = next;
		return (0);
	default:
		return (KINST_E_KIND);
	}
}

/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core.c: kinst's rule for one instruction (kinst_core_dissect(),
 * which the kernel runs on the live instruction and the analysis on the
 * host), the table's instruction records, the trampoline fill and the
 * emulation of every PC-relative and register-jump class over a register
 * file, for riscv; the rest of the core is ../dbp/kinst_core_dbp.c.
 * Freestanding C99, no headers, no library calls: the kernel glue runs the
 * trap-time part in probe context and the user-space harness in a SIGTRAP
 * handler, and neither may call into code that could itself be probed
 * (kinst's kinst_memcpy() rule).  The encodings it tests are
 * kinst_encoding.h's, rendered from generator/isa/riscv/tables.py.
 *
 * The classes are kinst's (sys/cddl/dev/kinst/riscv/kinst_isa.c), with the
 * correction docs/refusals.md lists: auipc with rd = x0 writes nothing.
 */

#include "kinst_core.h"

#define	KINST_NONE	0xff	/* km_rd, km_rs1, km_rs2, km_funct3: not used */
#define	KINST_EBREAK	0x00100073U

/* A record byte: the length bit, the code above it, and the masked bit. */
int
kinst_core_record_byte(kc_uint8_t b, kc_uint8_t *len)
{

	*len = (b & KINST_R_LONG) != 0 ? KINST_INSN_SIZE : KINST_INSN_C_SIZE;
	if ((b & 0xc0) != 0)
		return (-1);
	return ((b >> KINST_R_CODE_SHIFT) & 15);
}

#define	KINST_IS(v, c)	(((v) & KINST_##c##_MASK) == KINST_##c##_MATCH)

/* The kind a 4-byte instruction is emulated as, or KINST_K_TRAMPOLINE. */
static int
kinst_core_kind32(kc_uint32_t w)
{

	switch (w & 0x7f) {
	case KINST_OP_JAL:
		return (KINST_K_JAL);
	case KINST_OP_JALR:
		return (KINST_K_JALR);
	case KINST_OP_BRANCH:
		return (KINST_K_BRANCH);
	case KINST_OP_AUIPC:
		return (KINST_K_AUIPC);
	default:
		return (KINST_K_TRAMPOLINE);
	}
}

/* The kind a 2-byte instruction is emulated as, or KINST_K_TRAMPOLINE. */
static int
kinst_core_kind16(kc_uint32_t h)
{

	if (KINST_IS(h, C_J))
		return (KINST_K_C_J);
	if (KINST_IS(h, C_BEQZ) || KINST_IS(h, C_BNEZ))
		return (KINST_K_C_BRANCH);
	if (KINST_IS(h, C_JR_FAMILY) && ((h >> 7) & 31) != 0)
		return (KINST_K_C_JR);
	return (KINST_K_TRAMPOLINE);
}

/* The register and condition fields of a 4-byte instruction's kind. */
static void
kinst_core_derive32(kc_uint32_t w, struct kinst_md *md)
{

	switch (md->km_kind) {
	case KINST_K_JAL:
		md->km_rd = (w >> 7) & 31;
		break;
	case KINST_K_JALR:
		md->km_rd = (w >> 7) & 31;
		md->km_rs1 = (w >> 15) & 31;
		break;
	case KINST_K_BRANCH:
		md->km_rs1 = (w >> 15) & 31;
		md->km_rs2 = (w >> 20) & 31;
		md->km_funct3 = (w >> 12) & 7;
		break;
	case KINST_K_AUIPC:
		md->km_rd = (w >> 7) & 31;
		break;
	}
}

/* The register and condition fields of a 2-byte instruction's kind. */
static void
kinst_core_derive16(kc_uint32_t h, struct kinst_md *md)
{

	switch (md->km_kind) {
	case KINST_K_C_BRANCH:
		md->km_rs1 = 8 + ((h >> 7) & 7);
		md->km_funct3 = KINST_IS(h, C_BNEZ) ? 1 : 0;
		break;
	case KINST_K_C_JR:
		md->km_rs1 = (h >> 7) & 31;
		md->km_rd = ((h >> 12) & 1) != 0 ? 1 : 0;
		break;
	}
}

/*
 * kinst's rule for the instruction b[0, len), len being 2 or 4 (where the
 * decoder says it ends): how a hit on it resumes and what the emulation
 * needs (kinst_instr_dissect() of riscv/kinst_isa.c), or why kinst skips
 * it (kinst_make_probe()).  0, a KINST_RF_* code (the metadata is still
 * filled), or -1 for another length.  The analysis runs this on the host;
 * the kernel on the live instruction (kinst_core_derive()).
 */
int
kinst_core_dissect(const volatile kc_uint8_t *b, kc_uint32_t len,
    struct kinst_md *md)
{
	kc_uint32_t v;

	if (len != KINST_INSN_SIZE && len != KINST_INSN_C_SIZE)
		return (-1);
	v = kinst_core_get(b, (int)len);
	md->km_insn = v;
	md->km_instlen = (kc_uint8_t)len;
	md->km_rd = md->km_rs1 = md->km_rs2 = md->km_funct3 = KINST_NONE;
	md->km_kind = (kc_uint8_t)(len == KINST_INSN_SIZE ?
	    kinst_core_kind32(v) : kinst_core_kind16(v));
	md->km_imm = kinst_core_imm(v, md->km_kind);
	if (len == KINST_INSN_SIZE) {
		kinst_core_derive32(v, md);
		if ((v & 0x7f) == KINST_OP_SYSTEM)
			return (KINST_RF_SYSTEM);
		if (KINST_IS(v, LR_W) || KINST_IS(v, LR_D) ||
		    KINST_IS(v, SC_W) || KINST_IS(v, SC_D))
			return (KINST_RF_LR_SC);
		return (0);
	}
	kinst_core_derive16(v, md);
	return (KINST_IS(v, C_EBREAK) ? KINST_RF_SYSTEM : 0);
}

/*
 * The length the instruction at 'b' announces (its low bits): 2, 4, or 0
 * for 6 bytes or more, which no RV64GC instruction is.
 */
int
kinst_core_length(const volatile kc_uint8_t *b)
{

	if ((b[0] & 3) != 3)
		return (KINST_INSN_C_SIZE);
	return ((b[0] & 0x1f) != 0x1f ? KINST_INSN_SIZE : 0);
}

/*
 * Fill a KINST_TRAMP_SIZE trampoline: the instruction, a c.nop after a
 * compressed one, then the trampoline's own ebreak at +4, which the glue
 * recognises by its address.  The caller syncs the instruction caches.
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

/* Where a thread resumes after the trampoline of the instruction at 'pp'. */
kc_uintptr_t
kinst_core_resume(const struct kinst_md *md, kc_uintptr_t pp)
{

	return (pp + md->km_instlen);
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

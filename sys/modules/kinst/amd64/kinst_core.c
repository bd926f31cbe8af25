/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core.c: the table's instruction records, kinst's per-probe metadata
 * derived from the live instruction, trampoline fill and call emulation over
 * a register file, for amd64.  Freestanding C99, no headers, no library
 * calls: the kernel glue runs the trap-time part in probe context and the
 * user-space harness in a SIGTRAP handler, and neither may call into code
 * that could itself be probed (kinst's kinst_memcpy() rule).  Hence byte
 * loops instead of memcpy(), and no structure assignment a compiler could
 * turn into one.
 *
 * kinst_core_dissect() is kinst_instr_dissect() of
 * sys/cddl/dev/kinst/amd64/kinst_isa.c with the corrections docs/refusals.md
 * lists, and the one implementation of that rule: the analysis runs this
 * file too, built for the host (generator/isa/host.py), on every
 * instruction it classifies.  kinst_core_derive() applies it to the live
 * instruction a table record names; the two must agree, or the probe is
 * refused (KINST_E_TABLE).
 */

#include "kinst_core.h"

#define	KINST_INT32_MIN	(-(kc_int64_t)0x80000000)
#define	KINST_INT32_MAX	((kc_int64_t)0x7fffffff)

/* By record code: how far before the instruction's end its disp32 lies. */
static const kc_uint8_t kinst_disp_tail[16] = KINST_DISP_TAIL;

/*
 * The record at kw_p, for kinst_funcs.c's kinst_core_next(): a byte of
 * length and code, then, for KINST_R_EXTENDED, a byte of code and mask
 * count and the masks.  The kind, or -1 for a record this core cannot
 * read.
 */
int
kinst_core_record(struct kinst_walk *kw, struct kinst_insn *ki)
{
	kc_uint32_t code, i;
	kc_uint8_t b;

	b = *kw->kw_p++;
	ki->ki_len = (b & 15) + 1;
	code = b >> 4;
	if (code == KINST_R_EXTENDED) {
		if (kw->kw_p >= kw->kw_end)
			return (-1);
		b = *kw->kw_p++;
		code = b & 15;
		ki->ki_nmask = b >> 4;
		if (kw->kw_end - kw->kw_p < ki->ki_nmask)
			return (-1);
		for (i = 0; i < ki->ki_nmask; i++)
			ki->ki_mask[i] = *kw->kw_p++;
	}
	ki->ki_dispoff = kinst_disp_tail[code] != 0 ?
	    ki->ki_len - kinst_disp_tail[code] : 0;
	if (code >= KINST_R_RIPREL_IMM1 && code <= KINST_R_RIPREL_IMM4)
		code = KINST_K_RIPREL;	/* kinst_core_derive() checks it */
	return ((int)code);
}

static const kc_uint32_t kinst_set_prefix[8] = KINST_SET_PREFIX;
static const kc_uint32_t kinst_set_modrm_1[8] = KINST_SET_MODRM_1;
static const kc_uint32_t kinst_set_no_modrm_0f[8] = KINST_SET_NO_MODRM_0F;

/* Is byte 'b' in 'set' (a byte set of kinst_encoding.h)? */
#define	KINST_IN(set, b)	(((set)[(b) >> 5] >> ((b) & 31)) & 1)

static kc_int64_t
kinst_core_s32(const kc_uint8_t *p)
{

	return ((kc_int32_t)((kc_uint32_t)p[0] | (kc_uint32_t)p[1] << 8 |
	    (kc_uint32_t)p[2] << 16 | (kc_uint32_t)p[3] << 24));
}

static kc_int64_t
kinst_core_s8(kc_uint8_t b)
{

	return ((kc_int8_t)b);
}

/*
 * Where the ModR/M byte of the instruction b[0, len) whose opcode is at
 * 'opcidx' is, or -1 when it has none: after the opcode (one-byte map,
 * 0f map), after 0f 38 / 0f 3a and their opcode, and after a VEX, EVEX or
 * XOP prefix and the opcode (vzeroupper and vzeroall have none).
 */
static int
kinst_core_modrm_index(const kc_uint8_t *b, kc_uint32_t len,
    kc_uint32_t opcidx)
{
	kc_uint32_t idx, op;

	op = b[opcidx];
	if (op == 0x0f) {
		if (opcidx + 1 >= len)
			return (-1);
		op = b[opcidx + 1];
		if (op == 0x38 || op == 0x3a)
			idx = opcidx + 3;
		else if (KINST_IN(kinst_set_no_modrm_0f, op))
			return (-1);
		else
			idx = opcidx + 2;
	} else if (op == 0xc5) {
		if (opcidx + 2 < len && b[opcidx + 2] == 0x77)
			return (-1);
		idx = opcidx + 3;
	} else if (op == 0xc4) {
		if (opcidx + 3 < len && (b[opcidx + 1] & 0x1f) == 1 &&
		    b[opcidx + 3] == 0x77)
			return (-1);
		idx = opcidx + 4;
	} else if (op == 0x62)
		idx = opcidx + 5;
	else if (op == 0x8f && opcidx + 1 < len && (b[opcidx + 1] & 0x1f) >= 8)
		idx = opcidx + 4;
	else if (KINST_IN(kinst_set_modrm_1, op))
		idx = opcidx + 1;
	else
		return (-1);
	return (idx < len ? (int)idx : -1);
}

/*
 * The operand of a call through ff /2 or /3 whose ModR/M byte is at 'rm'
 * (not %rip-relative): kinst's reg1, reg2, scale and disp, with the
 * corrections of kinst_core_dissect().  0, or -1 when the bytes end early.
 */
static int
kinst_core_call_operand(const kc_uint8_t *b, kc_uint32_t len,
    kc_uint32_t rm, kc_uint8_t rex, struct kinst_md *md)
{
	kc_uint32_t mod, r_m, dispoff, sib, base, index;

	mod = b[rm] >> 6;
	r_m = b[rm] & 7;
	dispoff = rm + 1;
	if (mod != 3 && r_m == 4) {
		if (rm + 2 > len)
			return (-1);
		sib = b[rm + 1];
		base = sib & 7;
		index = (sib >> 3) & 7;
		md->km_scale = (kc_uint8_t)(sib >> 6);
		dispoff = rm + 2;
		/* kinst: base != 5 only, and an index even of 100. */
		if (!(base == 5 && mod == 0))
			md->km_reg1 = (kc_int8_t)(base | (rex & 1) << 3);
		if (index != 4 || (rex & 2) != 0)
			md->km_reg2 = (kc_int8_t)(index | (rex & 2) << 2);
		if (base == 5 && mod == 0) {	/* kinst: never read */
			if (dispoff + 4 > len)
				return (-1);
			md->km_disp = kinst_core_s32(b + dispoff);
		}
	} else
		md->km_reg1 = (kc_int8_t)(r_m | (rex & 1) << 3);
	if (dispoff + (mod == 1 ? 1 : mod == 2 ? 4 : 0) > len)
		return (-1);
	if (mod == 1)
		md->km_disp = kinst_core_s8(b[dispoff]);
	else if (mod == 2)
		md->km_disp = kinst_core_s32(b + dispoff);
	else if (mod == 3)
		md->km_flags |= KINST_F_MOD_DIRECT;
	return (0);
}

/* The metadata of an instruction kinst_core_dissect() can say nothing of. */
static void
kinst_core_blank(kc_uint32_t len, struct kinst_md *md)
{
	kc_uint32_t i;

	md->km_kind = KINST_K_TRAMPOLINE;
	md->km_flags = 0;
	md->km_instlen = md->km_tinstlen = (kc_uint8_t)len;
	md->km_dispoff = 0;
	md->km_reg1 = md->km_reg2 = 0;
	md->km_scale = 0;
	md->km_disp = 0;
	for (i = 0; i < KINST_TEMPLATE_SIZE; i++)
		md->km_template[i] = 0;
}

/*
 * kinst's struct kinst_probe_md for the instruction b[0, len), as
 * sys/cddl/dev/kinst/amd64/kinst_isa.c's kinst_instr_dissect() computes it,
 * with kinstkit's corrections (docs/refusals.md): a REX byte counts only
 * right before the opcode, and 0xf1 (int1) is an opcode; a SIB index of
 * 100 without REX.X is no index, and a SIB base of 101 with mod 00 is a
 * disp32 and no base; a prefixed short jump keeps its prefixes when
 * widened.  This is the one implementation of the rule: the kernel runs
 * it when a probe is made, the analysis on every instruction.
 *
 * 'b' is a copy of the instruction (kinst_core_derive() makes one of the
 * live text), so that nothing here reads memory another CPU may write.
 * Returns 0, md->km_kind saying how a hit resumes; or KINST_RF_*, why the
 * instruction cannot be probed (after REL16 and TEMPLATE md holds no
 * metadata, after the others kinst's); or -1 when the bytes are not an
 * instruction kinst could read (only prefixes, or cut short).
 */
int
kinst_core_dissect(const kc_uint8_t *b, kc_uint32_t len, struct kinst_md *md)
{
	kc_uint32_t dispoff, i, mod, op, opcidx, reg, r_m;
	kc_uint8_t rex;
	int rm, rel32;

	if (len == 0 || len > KINST_MAX_INSN)
		return (-1);
	kinst_core_blank(len, md);
	rex = 0;
	for (opcidx = 0; opcidx < len &&
	    KINST_IN(kinst_set_prefix, b[opcidx]); opcidx++)
		rex = (b[opcidx] & 0xf0) == 0x40 ? b[opcidx] : 0;
	if (opcidx >= len)
		return (-1);
	op = b[opcidx];
	rm = kinst_core_modrm_index(b, len, opcidx);
	dispoff = 0;
	rel32 = 0;
	reg = 0;
	if (op == 0x0f && opcidx + 1 < len && b[opcidx + 1] >= 0x80 &&
	    b[opcidx + 1] <= 0x8f) {
		md->km_flags = KINST_F_JMP | KINST_F_RIPREL;
		dispoff = opcidx + 2;
		rel32 = 1;
	} else if ((op >= 0x70 && op <= 0x7f) || op == 0xeb) {
		if (opcidx + 2 > len)
			return (-1);
		md->km_flags = KINST_F_JMP | KINST_F_RIPREL;
		dispoff = opcidx + 1;
		md->km_disp = kinst_core_s8(b[dispoff]);
	} else if (op == 0xe9 || op == 0xe8) {
		md->km_flags = op == 0xe9 ? KINST_F_JMP | KINST_F_RIPREL :
		    KINST_F_CALL | KINST_F_DIRECT_CALL;
		dispoff = opcidx + 1;
		rel32 = 1;
	} else if (op == 0xff && rm >= 0) {
		reg = (b[rm] >> 3) & 7;
		/* As kinst; a far one (reg 3) is refused below. */
		if (reg == 2 || reg == 3)
			md->km_flags = KINST_F_CALL;
		else if (reg == 4 || reg == 5)
			md->km_flags = KINST_F_JMP;
	}
	if (rel32) {
		/* 66-prefixed: capstone read a rel16 (as AMD CPUs do). */
		if (dispoff + 4 > len) {
			kinst_core_blank(len, md);
			return (KINST_RF_REL16);
		}
		md->km_disp = kinst_core_s32(b + dispoff);
	}

	if (rm >= 0) {
		md->km_reg1 = md->km_reg2 = -1;
		mod = b[rm] >> 6;
		r_m = b[rm] & 7;
		if (mod == 0 && r_m == 5) {
			if ((kc_uint32_t)rm + 5 > len)
				return (-1);
			md->km_flags |= KINST_F_RIPREL;
			dispoff = rm + 1;
			md->km_disp = kinst_core_s32(b + dispoff);
		} else if ((md->km_flags & KINST_F_CALL) != 0 &&
		    kinst_core_call_operand(b, len, rm, rex, md) != 0)
			return (-1);
	}

	/* How a hit resumes, and the template (calls are emulated: none). */
	if ((md->km_flags & KINST_F_CALL) != 0) {
		if ((md->km_flags & KINST_F_DIRECT_CALL) != 0)
			md->km_kind = KINST_K_CALL_DIRECT;
		else if ((md->km_flags & KINST_F_RIPREL) != 0)
			md->km_kind = KINST_K_CALL_RIPREL;
		else if ((md->km_flags & KINST_F_MOD_DIRECT) != 0)
			md->km_kind = KINST_K_CALL_REG;
		else
			md->km_kind = KINST_K_CALL_MEM;
	} else if ((md->km_flags & KINST_F_RIPREL) != 0 &&
	    (op == 0xeb || (op >= 0x70 && op <= 0x7f))) {
		/*
		 * A short jump: its rel32 form, prefixes kept (kinst: not),
		 * which must be an instruction (15 bytes at most, so within
		 * the template) whose length no CPU reads otherwise (an
		 * operand-size prefix makes it a rel16 on AMD CPUs).
		 */
		md->km_tinstlen = (kc_uint8_t)(opcidx + (op == 0xeb ? 5 : 6));
		for (i = 0; i < opcidx; i++)
			if (b[i] == 0x66) {
				kinst_core_blank(len, md);
				return (KINST_RF_WIDEN16);
			}
		if (md->km_tinstlen > KINST_MAX_INSN) {
			kinst_core_blank(len, md);
			return (KINST_RF_TEMPLATE);
		}
		for (i = 0; i < opcidx; i++)
			md->km_template[i] = b[i];
		if (op == 0xeb) {
			md->km_template[opcidx] = 0xe9;
			md->km_dispoff = (kc_uint8_t)(opcidx + 1);
			md->km_disp -= 3;
			md->km_kind = KINST_K_JMP_WIDEN;
		} else {
			md->km_template[opcidx] = 0x0f;
			md->km_template[opcidx + 1] = (kc_uint8_t)(op + 0x10);
			md->km_dispoff = (kc_uint8_t)(opcidx + 2);
			md->km_disp -= 4;
			md->km_kind = KINST_K_JCC_WIDEN;
		}
	} else {
		for (i = 0; i < len; i++)
			md->km_template[i] = b[i];
		if ((md->km_flags & KINST_F_RIPREL) != 0) {
			/* Its rel32, rewritten for the trampoline: a hole. */
			for (i = 0; i < 4; i++)
				md->km_template[dispoff + i] = 0;
			md->km_dispoff = (kc_uint8_t)dispoff;
			if ((md->km_flags & KINST_F_JMP) == 0 || op == 0xff)
				md->km_kind = KINST_K_RIPREL;
			else
				md->km_kind = op == 0x0f ? KINST_K_JCC32 :
				    KINST_K_JMP32;
		}
	}

	/* Calls and jumps kinst would emulate or copy wrongly. */
	if (op == 0xff && rm >= 0 && (reg == 3 || reg == 5))
		return (reg == 3 ? KINST_RF_FAR_CALL : KINST_RF_FAR_JMP);
	if (md->km_kind == KINST_K_CALL_MEM ||
	    md->km_kind == KINST_K_CALL_RIPREL) {
		for (i = 0; i < opcidx; i++)
			if (b[i] == 0x67)
				return (KINST_RF_ADDR32_CALL);
		for (i = 0; i < opcidx; i++)
			if (b[i] == 0x64 || b[i] == 0x65)
				return (KINST_RF_SEGMENT_CALL);
	}
	/* A rel8 branch with no rel32 form: copied, it branches wrongly. */
	if (op >= 0xe0 && op <= 0xe3)
		return (KINST_RF_REL8_ONLY);
	return (0);
}

/*
 * kinst's metadata for the live instruction 'b' that record 'ki' describes:
 * kinst_core_dissect()'s, which must say it can be probed, and the kind
 * (and a %rip-relative rel32's place) the record says.
 */
int
kinst_core_derive(const struct kinst_insn *ki, const volatile kc_uint8_t *b,
    struct kinst_md *md)
{
	kc_uint8_t insn[KINST_MAX_INSN];

	if (ki->ki_kind == KINST_R_REFUSED || ki->ki_kind >= KINST_NKINDS ||
	    ki->ki_len == 0 || ki->ki_len > KINST_MAX_INSN)
		return (KINST_E_TABLE);
	kinst_bytecopy(insn, b, ki->ki_len);
	if (kinst_core_dissect(insn, ki->ki_len, md) != 0 ||
	    md->km_kind != ki->ki_kind ||
	    (md->km_kind == KINST_K_RIPREL && md->km_dispoff != ki->ki_dispoff))
		return (KINST_E_TABLE);
	return (0);
}

/*
 * The address a direct branch or call goes to, from the instruction at
 * 'patchpoint' (its rel32 ends the template, so a widened jump's adjusted
 * displacement reaches the same place); 0 for any other kind.
 */
kc_uint64_t
kinst_core_branch_target(const struct kinst_md *md, kc_uintptr_t patchpoint)
{

	switch (md->km_kind) {
	case KINST_K_JMP32:
	case KINST_K_JCC32:
	case KINST_K_JMP_WIDEN:
	case KINST_K_JCC_WIDEN:
	case KINST_K_CALL_DIRECT:
		return (patchpoint + md->km_tinstlen +
		    (kc_uint64_t)md->km_disp);
	default:
		return (0);
	}
}

int
kinst_core_is_call(const struct kinst_md *md)
{

	return ((md->km_flags & KINST_F_CALL) != 0);
}

static void
kinst_core_put32(volatile kc_uint8_t *p, kc_uint32_t v)
{

	p[0] = (kc_uint8_t)v;
	p[1] = (kc_uint8_t)(v >> 8);
	p[2] = (kc_uint8_t)(v >> 16);
	p[3] = (kc_uint8_t)(v >> 24);
}

/*
 * Fill a KINST_TRAMP_SIZE trampoline that runs at address 'tramp' for the
 * instruction at 'patchpoint', writing it into 'buf': the template, its rel32
 * rewritten so that it reaches the same absolute target from the trampoline,
 * then "jmp *0(%rip)" and the address of the next original instruction.  The
 * rest is int3 so that a stray jump into the tail traps cleanly.  Widened
 * short jumps need no special case here: their template already holds the
 * rel32 opcode and km_disp was adjusted for the longer instruction.
 *
 * 'buf' is 'tramp' itself where the glue can write where the trampoline runs
 * (the harness's mapping); where executable pages are read-only (FreeBSD's
 * trampoline pages, written through the direct map; the Linux glue's, through
 * a vmap() alias) it is another mapping of the same bytes, and only 'tramp'
 * decides the rel32.
 */
int
kinst_core_tramp_fill(const struct kinst_md *md, kc_uintptr_t patchpoint,
    kc_uintptr_t tramp, volatile kc_uint8_t *buf)
{

	return (kinst_core_tramp_fill_to(md, patchpoint, tramp, buf,
	    patchpoint + md->km_instlen));
}

/*
 * kinst_core_tramp_fill(), resuming at 'resume' instead of the next original
 * instruction: a jump probe's detour (the harness's jump part) runs several
 * displaced instructions one after another, each relocated by this rule,
 * and only the last resumes in the original code.
 */
int
kinst_core_tramp_fill_to(const struct kinst_md *md, kc_uintptr_t patchpoint,
    kc_uintptr_t tramp, volatile kc_uint8_t *buf, kc_uint64_t resume)
{
	kc_int64_t rel;
	kc_uint32_t i, len;

	if (kinst_core_is_call(md))
		return (KINST_E_KIND);
	len = md->km_tinstlen;
	kinst_bytecopy(buf, md->km_template, len);
	if ((md->km_flags & KINST_F_RIPREL) != 0) {
		rel = (kc_int64_t)(patchpoint + (kc_uint64_t)md->km_disp -
		    (kc_uint64_t)tramp);
		if (rel < KINST_INT32_MIN || rel > KINST_INT32_MAX)
			return (KINST_E_RANGE);
		kinst_core_put32(buf + md->km_dispoff, (kc_uint32_t)rel);
	}
	buf[len + 0] = 0xff;
	buf[len + 1] = 0x25;
	kinst_core_put32(buf + len + 2, 0);
	kinst_core_put32(buf + len + 6, (kc_uint32_t)resume);
	kinst_core_put32(buf + len + 10, (kc_uint32_t)(resume >> 32));
	for (i = len + 14; i < KINST_TRAMP_SIZE; i++)
		buf[i] = KINST_PATCHVAL;
	return (0);
}

static kc_uint64_t
kinst_core_reg(const struct kinst_regs *kr, int reg)
{

	return (reg < 0 ? 0 : kr->kr_gpr[reg & 15]);
}

static kc_uint64_t
kinst_core_load64(kc_uint64_t addr)
{

	return (*(const volatile kc_uint64_t *)(kc_uintptr_t)addr);
}

/*
 * Emulate a call: compute where it goes and what it would push.  The glue
 * pushes '*retaddr' and sets %rip to '*target' in its own frame (in the
 * kernel, dtrace_invop_start's scratch slot and bp_call do the push).
 * Register operands use the values at the breakpoint, %rsp before the push,
 * exactly what the call itself would have used.
 */
int
kinst_core_call(const struct kinst_md *md, kc_uintptr_t patchpoint,
    const struct kinst_regs *kr, kc_uint64_t *target, kc_uint64_t *retaddr)
{
	kc_uint64_t next, ea;

	next = patchpoint + md->km_instlen;
	ea = kinst_core_reg(kr, md->km_reg1) +
	    (kinst_core_reg(kr, md->km_reg2) << md->km_scale) +
	    (kc_uint64_t)md->km_disp;
	switch (md->km_kind) {
	case KINST_K_CALL_DIRECT:
		*target = kinst_core_branch_target(md, patchpoint);
		break;
	case KINST_K_CALL_RIPREL:
		*target = kinst_core_load64(next + (kc_uint64_t)md->km_disp);
		break;
	case KINST_K_CALL_REG:
		*target = ea;
		break;
	case KINST_K_CALL_MEM:
		*target = kinst_core_load64(ea);
		break;
	default:
		return (KINST_E_KIND);
	}
	*retaddr = next;
	return (0);
}

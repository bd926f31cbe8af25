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
 * kinst_core_derive() follows sys/cddl/dev/kinst/amd64/kinst_isa.c's
 * kinst_instr_dissect() with the corrections generator/isa/amd64/classify.py
 * makes (and docs/refusals.md lists): a SIB index of 100 without REX.X is no
 * index, a SIB base of 101 with mod 00 is a disp32 and no base, a prefixed
 * short jump keeps its prefixes when widened, and a REX byte counts only
 * right before the opcode.  The record says which kind the instruction is;
 * the bytes must agree, or the probe is refused (KINST_E_TABLE).
 */

#include "kinst_core.h"

#define	KINST_INT32_MIN	(-(kc_int64_t)0x80000000)
#define	KINST_INT32_MAX	((kc_int64_t)0x7fffffff)

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
	kc_uint32_t code, i;
	kc_uint8_t b;

	if (kw->kw_off >= kw->kw_size || kw->kw_p >= kw->kw_end)
		return (0);
	b = *kw->kw_p++;
	ki->ki_len = (b & 15) + 1;
	code = b >> 4;
	ki->ki_nmask = 0;
	if (code == KINST_R_EXTENDED) {
		if (kw->kw_p >= kw->kw_end)
			return (-KINST_E_TABLE);
		b = *kw->kw_p++;
		code = b & 15;
		ki->ki_nmask = b >> 4;
		if (kw->kw_end - kw->kw_p < ki->ki_nmask)
			return (-KINST_E_TABLE);
		for (i = 0; i < ki->ki_nmask; i++)
			ki->ki_mask[i] = *kw->kw_p++;
	}
	ki->ki_dispoff = 0;
	switch (code) {
	case KINST_K_RIPREL:
		ki->ki_dispoff = ki->ki_len - 4;
		break;
	case KINST_R_RIPREL_IMM1:
		ki->ki_dispoff = ki->ki_len - 5;
		break;
	case KINST_R_RIPREL_IMM2:
		ki->ki_dispoff = ki->ki_len - 6;
		break;
	case KINST_R_RIPREL_IMM4:
		ki->ki_dispoff = ki->ki_len - 8;
		break;
	case KINST_R_REFUSED:
		break;
	default:
		if (code >= KINST_NKINDS)
			return (-KINST_E_TABLE);
		break;
	}
	if (code >= KINST_R_RIPREL_IMM1 && code <= KINST_R_RIPREL_IMM4)
		code = KINST_K_RIPREL;	/* kinst_core_derive() checks it */
	ki->ki_kind = (kc_uint8_t)code;
	ki->ki_off = kw->kw_off;
	ki->ki_probe = code == KINST_R_REFUSED ? 0 : kw->kw_probe++;
	kw->kw_off += ki->ki_len;
	return (1);
}

/*
 * Is 'copy', a writable copy of the live function's kf_size bytes, the
 * function the table was made from?  The fields relocations fill are zeroed
 * first, as the generator zeroed them.  0, KINST_E_BYTES or KINST_E_TABLE.
 */
int
kinst_core_digest_ok(const struct kinst_table *kt, const struct kinst_func *kf,
    kc_uint8_t *copy)
{
	struct kinst_walk kw;
	struct kinst_insn ki;
	kc_uint32_t i, off, width;
	int rv;

	kinst_core_walk(kt, kf, &kw);
	while ((rv = kinst_core_next(&kw, &ki)) > 0) {
		for (i = 0; i < ki.ki_nmask; i++) {
			off = ki.ki_off + (ki.ki_mask[i] & 15);
			width = 1U << ((ki.ki_mask[i] >> 4) & 3);
			if (off + width > kf->kf_size)
				return (KINST_E_TABLE);
			while (width-- > 0)
				copy[off++] = 0;
		}
	}
	if (rv < 0)
		return (KINST_E_TABLE);
	return (kinst_func_digest_ok(kt, kf, copy) ? 0 : KINST_E_BYTES);
}

static int
kinst_core_prefix(kc_uint8_t b)
{

	switch (b) {
	case 0xf0: case 0xf2: case 0xf3:
	case 0x26: case 0x2e: case 0x36: case 0x3e: case 0x64: case 0x65:
	case 0x66: case 0x67:
		return (1);
	default:
		return ((b & 0xf0) == 0x40);
	}
}

static kc_int64_t
kinst_core_s32(const volatile kc_uint8_t *p)
{

	return ((kc_int32_t)((kc_uint32_t)p[0] | (kc_uint32_t)p[1] << 8 |
	    (kc_uint32_t)p[2] << 16 | (kc_uint32_t)p[3] << 24));
}

static kc_int64_t
kinst_core_s8(kc_uint8_t b)
{

	return ((kc_int8_t)b);
}

/* The operand of ff /2 (call through a register or memory) at 'rm'. */
static int
kinst_core_call_operand(const volatile kc_uint8_t *b, kc_uint32_t len,
    kc_uint32_t rm, kc_uint8_t rex, struct kinst_md *md)
{
	kc_uint32_t mod, r_m, dispoff, sib, base, index, need;

	mod = b[rm] >> 6;
	r_m = b[rm] & 7;
	md->km_reg1 = md->km_reg2 = -1;
	if (mod == 0 && r_m == 5) {
		if (md->km_kind != KINST_K_CALL_RIPREL || rm + 5 > len)
			return (KINST_E_TABLE);
		md->km_flags |= KINST_F_RIPREL;
		md->km_disp = kinst_core_s32(b + rm + 1);
		return (0);
	}
	if (md->km_kind != (mod == 3 ? KINST_K_CALL_REG : KINST_K_CALL_MEM))
		return (KINST_E_TABLE);
	dispoff = rm + 1;
	if (mod != 3 && r_m == 4) {
		if (rm + 2 > len)
			return (KINST_E_TABLE);
		sib = b[rm + 1];
		base = sib & 7;
		index = (sib >> 3) & 7;
		md->km_scale = (kc_uint8_t)(sib >> 6);
		dispoff = rm + 2;
		if (!(base == 5 && mod == 0))
			md->km_reg1 = (kc_int8_t)(base | (rex & 1) << 3);
		if (index != 4 || (rex & 2) != 0)
			md->km_reg2 = (kc_int8_t)(index | (rex & 2) << 2);
		if (base == 5 && mod == 0) {
			if (dispoff + 4 > len)
				return (KINST_E_TABLE);
			md->km_disp = kinst_core_s32(b + dispoff);
		}
	} else
		md->km_reg1 = (kc_int8_t)(r_m | (rex & 1) << 3);
	need = dispoff + (mod == 1 ? 1 : mod == 2 ? 4 : 0);
	if (need > len)
		return (KINST_E_TABLE);
	if (mod == 1)
		md->km_disp = kinst_core_s8(b[dispoff]);
	else if (mod == 2)
		md->km_disp = kinst_core_s32(b + dispoff);
	else if (mod == 3)
		md->km_flags |= KINST_F_MOD_DIRECT;
	return (0);
}

/*
 * May the instruction 'b' (len bytes, its opcode at opcidx) run unchanged in
 * a trampoline, as a KINST_K_TRAMPOLINE record says?  Not a branch or call
 * whose target is relative to where it runs (the table gives those kinds of
 * their own, or refuses them), nor a call through a register or memory
 * (emulated), nor an ff-group instruction with a %rip-relative operand.  A
 * %rip-relative operand of another opcode is not recognised here (that
 * needs the opcode map): the function's digest, which covers its records,
 * vouches for their kinds.
 */
static int
kinst_core_copyable(const volatile kc_uint8_t *b, kc_uint32_t len,
    kc_uint32_t opcidx)
{
	kc_uint8_t op, reg;

	op = b[opcidx];
	if (op == 0xe8 || op == 0xe9 || op == 0xeb ||
	    (op >= 0x70 && op <= 0x7f) || (op >= 0xe0 && op <= 0xe3))
		return (0);
	if (opcidx + 1 >= len)
		return (1);
	if (op == 0x0f && b[opcidx + 1] >= 0x80 && b[opcidx + 1] <= 0x8f)
		return (0);
	reg = (b[opcidx + 1] >> 3) & 7;
	if (op == 0xff && (reg == 2 || reg == 3 ||
	    (b[opcidx + 1] & 0xc7) == 0x05))
		return (0);
	return (1);
}

/*
 * kinst's metadata for the live instruction 'b' that record 'ki' describes.
 * The template is the instruction with its rel32 zeroed (the trampoline
 * fill writes the one that reaches the target from the trampoline), or the
 * widened rel32 form of a short jump; calls have none, they are emulated.
 */
int
kinst_core_derive(const struct kinst_insn *ki, const volatile kc_uint8_t *b,
    struct kinst_md *md)
{
	kc_uint32_t len, op, i, opcidx;
	kc_uint8_t rex;

	len = ki->ki_len;
	if (ki->ki_kind == KINST_R_REFUSED || len == 0 ||
	    len > KINST_MAX_INSN)
		return (KINST_E_TABLE);
	for (i = 0; i < KINST_TEMPLATE_SIZE; i++)
		md->km_template[i] = 0;
	md->km_kind = ki->ki_kind;
	md->km_flags = 0;
	md->km_instlen = md->km_tinstlen = (kc_uint8_t)len;
	md->km_dispoff = 0;
	md->km_reg1 = md->km_reg2 = 0;
	md->km_scale = 0;
	md->km_disp = 0;

	rex = 0;
	for (opcidx = 0; opcidx < len && kinst_core_prefix(b[opcidx]); opcidx++)
		rex = (b[opcidx] & 0xf0) == 0x40 ? b[opcidx] : 0;
	if (opcidx >= len)
		return (KINST_E_TABLE);
	op = b[opcidx];
	if (op == 0xff && opcidx + 1 < len && ((b[opcidx + 1] >> 3) & 7) >= 4 &&
	    ((b[opcidx + 1] >> 3) & 7) <= 5)
		md->km_flags |= KINST_F_JMP;

	switch (ki->ki_kind) {
	case KINST_K_TRAMPOLINE:
		if (!kinst_core_copyable(b, len, opcidx))
			return (KINST_E_TABLE);
		kinst_bytecopy(md->km_template, b, len);
		return (0);
	case KINST_K_RIPREL:
		/* ModR/M mod 00 r/m 101 right before the rel32. */
		if (ki->ki_dispoff <= opcidx || ki->ki_dispoff + 4U > len ||
		    (b[ki->ki_dispoff - 1] & 0xc7) != 0x05)
			return (KINST_E_TABLE);
		md->km_flags |= KINST_F_RIPREL;
		md->km_dispoff = ki->ki_dispoff;
		break;
	case KINST_K_JMP32:
		if (op != 0xe9 || len != opcidx + 5)
			return (KINST_E_TABLE);
		md->km_flags = KINST_F_JMP | KINST_F_RIPREL;
		md->km_dispoff = (kc_uint8_t)(opcidx + 1);
		break;
	case KINST_K_JCC32:
		if (op != 0x0f || len != opcidx + 6 || b[opcidx + 1] < 0x80 ||
		    b[opcidx + 1] > 0x8f)
			return (KINST_E_TABLE);
		md->km_flags = KINST_F_JMP | KINST_F_RIPREL;
		md->km_dispoff = (kc_uint8_t)(opcidx + 2);
		break;
	case KINST_K_JMP_WIDEN:
		if (op != 0xeb || len != opcidx + 2)
			return (KINST_E_TABLE);
		kinst_bytecopy(md->km_template, b, opcidx);
		md->km_template[opcidx] = 0xe9;
		md->km_flags = KINST_F_JMP | KINST_F_RIPREL;
		md->km_dispoff = (kc_uint8_t)(opcidx + 1);
		md->km_tinstlen = (kc_uint8_t)(opcidx + 5);
		md->km_disp = kinst_core_s8(b[opcidx + 1]) - 3;
		return (0);
	case KINST_K_JCC_WIDEN:
		if (op < 0x70 || op > 0x7f || len != opcidx + 2)
			return (KINST_E_TABLE);
		kinst_bytecopy(md->km_template, b, opcidx);
		md->km_template[opcidx] = 0x0f;
		md->km_template[opcidx + 1] = (kc_uint8_t)(op + 0x10);
		md->km_flags = KINST_F_JMP | KINST_F_RIPREL;
		md->km_dispoff = (kc_uint8_t)(opcidx + 2);
		md->km_tinstlen = (kc_uint8_t)(opcidx + 6);
		md->km_disp = kinst_core_s8(b[opcidx + 1]) - 4;
		return (0);
	case KINST_K_CALL_DIRECT:
		if (op != 0xe8 || len != opcidx + 5)
			return (KINST_E_TABLE);
		md->km_flags = KINST_F_CALL | KINST_F_DIRECT_CALL;
		md->km_disp = kinst_core_s32(b + opcidx + 1);
		return (0);
	case KINST_K_CALL_REG:
	case KINST_K_CALL_MEM:
	case KINST_K_CALL_RIPREL:
		if (op != 0xff || opcidx + 1 >= len ||
		    ((b[opcidx + 1] >> 3) & 7) != 2)
			return (KINST_E_TABLE);
		md->km_flags = KINST_F_CALL;
		return (kinst_core_call_operand(b, len, opcidx + 1, rex, md));
	default:
		return (KINST_E_TABLE);
	}
	/* A rel32 in the template: copy the instruction, leave the hole. */
	md->km_disp = kinst_core_s32(b + md->km_dispoff);
	kinst_bytecopy(md->km_template, b, len);
	for (i = 0; i < 4; i++)
		md->km_template[md->km_dispoff + i] = 0;
	return (0);
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
	kc_uint64_t resume;
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
	resume = patchpoint + md->km_instlen;
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
		*target = next + (kc_uint64_t)md->km_disp;
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

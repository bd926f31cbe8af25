/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core_dbp.c: the part of the portable core that arm64 and riscv, the
 * "double breakpoint" ISAs, share: reading a function's one-byte records,
 * the breakpoint a probe writes, and the little-endian byte helpers the
 * ISA cores use.
 * Freestanding C99, no headers, no library calls: the kernel glue runs it
 * in probe context and the user-space harness in a SIGTRAP handler, and
 * neither may call into code that could itself be probed (kinst's
 * kinst_memcpy() rule).  Hence byte loops.
 */

#include "kinst_core.h"

/*
 * The record at kw_p, for kinst_funcs.c's kinst_core_next(): one byte, which
 * the ISA's kinst_core_record_byte() reads.  The kind, or -1.
 */
int
kinst_core_record(struct kinst_walk *kw, struct kinst_insn *ki)
{
	kc_uint8_t b, len;
	int code;

	b = *kw->kw_p++;
	if ((code = kinst_core_record_byte(b, &len)) < 0)
		return (-1);
	ki->ki_len = len;
	/* A relocation fills part of it: the whole instruction is masked. */
	ki->ki_nmask = (b & KINST_R_MASKED) != 0;
	ki->ki_mask[0] = KINST_MASK(0, len == 4 ? 2 : 1);
	return (code);
}

/*
 * The emulation data for the live instruction 'b' that record 'ki'
 * describes: its length must be the one its encoding announces, and
 * kinst_core_dissect() must accept it as of the recorded kind.
 */
int
kinst_core_derive(const struct kinst_insn *ki, const volatile kc_uint8_t *b,
    struct kinst_md *md)
{

	if (ki->ki_kind >= KINST_NKINDS || kinst_core_length(b) != ki->ki_len ||
	    kinst_core_dissect(b, ki->ki_len, md) != 0 ||
	    md->km_kind != ki->ki_kind)
		return (KINST_E_TABLE);
	return (0);
}

int
kinst_core_is_emulated(const struct kinst_md *md)
{

	return (md->km_kind != KINST_K_TRAMPOLINE);
}

/*
 * The breakpoint for the probe in 'buf' (KINST_PATCH_SIZE bytes), and its
 * length: brk over the arm64 word; c.ebreak over the first halfword of a
 * riscv instruction, whatever its length (see riscv/kinst_core.h).
 */
int
kinst_core_patch(const struct kinst_md *md, kc_uint8_t *buf)
{

	(void)md;
	kinst_core_put(buf, KINST_PATCHVAL, KINST_PATCH_SIZE);
	return (KINST_PATCH_SIZE);
}

/* The low 'bits' bits of 'v', sign-extended. */
kc_int64_t
kinst_core_sext(kc_uint64_t v, int bits)
{

	v &= ((kc_uint64_t)1 << bits) - 1;
	if ((v >> (bits - 1)) & 1)
		v |= ~(((kc_uint64_t)1 << bits) - 1);
	return ((kc_int64_t)v);
}

/*
 * The immediate of 'w', an instruction of table kind 'kind', in bytes: the
 * runs of bits KINST_IMM_LAYOUTS names for the kind gathered, sign-extended
 * and scaled; 0 for a kind with no immediate.
 */
kc_int64_t
kinst_core_imm(kc_uint32_t w, int kind)
{
	static const struct kinst_imm_layout layouts[] = KINST_IMM_LAYOUTS;
	const struct kinst_imm_layout *l;
	const kc_uint8_t *p;
	kc_uint64_t v;
	int i;

	if (kind < 0 || kind >= KINST_IMM_LAYOUTS_N)
		return (0);
	l = &layouts[kind];
	if (l->kl_npieces == 0)
		return (0);
	v = 0;
	for (i = 0; i < l->kl_npieces; i++) {
		p = l->kl_pieces[i];
		v |= (kc_uint64_t)((w >> p[0]) &
		    (((kc_uint32_t)1 << p[2]) - 1)) << p[1];
	}
	return (kinst_core_sext(v, l->kl_bits) * l->kl_scale);
}

/* The little-endian value of 'len' bytes at 'p', at any alignment. */
kc_uint32_t
kinst_core_get(const volatile kc_uint8_t *p, int len)
{
	kc_uint32_t v;

	v = 0;
	while (len-- > 0)
		v = v << 8 | p[len];
	return (v);
}

/* Store the low 'len' bytes of 'v' at 'p', little-endian. */
void
kinst_core_put(volatile kc_uint8_t *p, kc_uint32_t v, int len)
{
	int i;

	for (i = 0; i < len; i++)
		p[i] = (kc_uint8_t)(v >> (8 * i));
}

/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core_dbp.c: the part of the portable core that arm64 and riscv, the
 * "double breakpoint" ISAs, share: the walk over a function's one-byte
 * records, the digest check over a copy of the live bytes, the breakpoint
 * a probe writes, and the little-endian byte helpers the ISA cores use.
 * Freestanding C99, no headers, no library calls: the kernel glue runs it
 * in probe context and the user-space harness in a SIGTRAP handler, and
 * neither may call into code that could itself be probed (kinst's
 * kinst_memcpy() rule).  Hence byte loops.
 */

#include "kinst_core.h"

/*
 * The next instruction of the walk: 1, or 0 at the function's end, or
 * -KINST_E_TABLE for a record this core cannot read.
 */
int
kinst_core_next(struct kinst_walk *kw, struct kinst_insn *ki)
{
	kc_uint8_t b, len;
	int code;

	if (kw->kw_off >= kw->kw_size || kw->kw_p >= kw->kw_end)
		return (0);
	b = *kw->kw_p++;
	code = kinst_core_record(b, &len);
	if (code < 0 || (code >= KINST_NKINDS && code != KINST_R_REFUSED))
		return (-KINST_E_TABLE);
	ki->ki_len = len;
	ki->ki_kind = (kc_uint8_t)code;
	ki->ki_masked = (b & KINST_R_MASKED) != 0;
	ki->ki_off = kw->kw_off;
	ki->ki_probe = code == KINST_R_REFUSED ? 0 : kw->kw_probe++;
	kw->kw_off += len;
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

/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_funcs.c: reading a kinstkit kinst table's function records, and the
 * digest that shows a live function is the one the table was made from.
 * Freestanding C99, no library calls (see kinst_funcs.h).
 */

#include "kinst_funcs.h"

static kc_uint32_t
kinst_le32(const kc_uint8_t *p)
{

	return ((kc_uint32_t)p[0] | (kc_uint32_t)p[1] << 8 |
	    (kc_uint32_t)p[2] << 16 | (kc_uint32_t)p[3] << 24);
}

static kc_uint64_t
kinst_le64(const kc_uint8_t *p)
{

	return ((kc_uint64_t)kinst_le32(p) | (kc_uint64_t)kinst_le32(p + 4) << 32);
}

void
kinst_bytecopy(volatile kc_uint8_t *dst, const volatile kc_uint8_t *src,
    kc_uint32_t len)
{

	while (len-- > 0)
		*dst++ = *src++;
}

/* Function 'f' of the table, read out of its record. */
void
kinst_func_get(const struct kinst_table *kt, kc_uint32_t f,
    struct kinst_func *kf)
{
	const kc_uint8_t *r;

	r = kt->kt_funcs + (kc_uint64_t)f * KINST_FUNC_RECSIZE;
	kf->kf_addr = kinst_le64(r + KINST_FUNC_ADDR_OFF);
	kf->kf_digest = kinst_le64(r + KINST_FUNC_DIGEST_OFF);
	kf->kf_size = kinst_le32(r + KINST_FUNC_SIZE_OFF);
	kf->kf_name = kt->kt_names + kinst_le32(r + KINST_FUNC_NAME_OFF);
	kf->kf_records = kinst_le32(r + KINST_FUNC_RECORDS_OFF);
	kf->kf_first = kinst_le32(r + KINST_FUNC_FIRST_OFF);
	if (f + 1 < kt->kt_nfuncs) {
		kf->kf_end = kinst_le32(r + KINST_FUNC_RECSIZE +
		    KINST_FUNC_RECORDS_OFF);
		kf->kf_nprobes = kinst_le32(r + KINST_FUNC_RECSIZE +
		    KINST_FUNC_FIRST_OFF) - kf->kf_first;
	} else {
		kf->kf_end = kt->kt_records_size;
		kf->kf_nprobes = kt->kt_nprobes - kf->kf_first;
	}
}

/*
 * The function whose [address, address + size) holds the link-time address
 * 'addr', or -1.  Functions are sorted by address: a binary search.
 */
long
kinst_func_at(const struct kinst_table *kt, kc_uint64_t addr)
{
	struct kinst_func kf;
	kc_uint32_t lo, hi, mid;

	lo = 0;
	hi = kt->kt_nfuncs;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		if (kinst_le64(kt->kt_funcs + (kc_uint64_t)mid *
		    KINST_FUNC_RECSIZE + KINST_FUNC_ADDR_OFF) <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return (-1);
	kinst_func_get(kt, lo - 1, &kf);
	return (addr - kf.kf_addr < kf.kf_size ? (long)(lo - 1) : -1);
}

/* The i-th function in name (strcmp()) order. */
kc_uint32_t
kinst_func_byname(const struct kinst_table *kt, kc_uint32_t i)
{

	return (kinst_le32(kt->kt_byname + (kc_uint64_t)i * 4));
}

/*
 * CRC-32 (IEEE 802.3, reflected, as zlib's crc32()) in the high half and
 * Adler-32 (zlib's adler32()) in the low half of the digest.  Bit by bit:
 * a digest is computed once per function, when its probes are made, never
 * in probe context.
 */
kc_uint64_t
kinst_func_digest(const kc_uint8_t *buf, kc_uint32_t len)
{
	kc_uint32_t crc, a, b, i;
	int k;

	crc = 0xffffffffU;
	a = 1;
	b = 0;
	for (i = 0; i < len; i++) {
		crc ^= buf[i];
		for (k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0xedb88320U & (0U - (crc & 1)));
		a = (a + buf[i]) % 65521U;
		b = (b + a) % 65521U;
	}
	return ((kc_uint64_t)(crc ^ 0xffffffffU) << 32 | (kc_uint64_t)(b << 16 | a));
}

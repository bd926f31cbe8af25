/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_funcs.c: reading a kinstkit kinst table's function records, the
 * check of the whole table's structure, and the digest that shows a live
 * function is the one the table was made from (kinst_core_digest_ok(), the
 * one check for every ISA).  Freestanding C99, no
 * library calls (see kinst_funcs.h).  The structure check walks each
 * function's instruction records: kinst_core_walk() here starts a walk,
 * and kinst_core_next() steps it, one record at a time, which the ISA's
 * kinst_core_record() reads.
 */

#include "kinst_core.h"

/* The digest of no bytes: CRC-32 0, Adler-32 1. */
#define	KINST_DIGEST_EMPTY	((kc_uint64_t)1)

static kc_uint32_t
kinst_le32(const kc_uint8_t *p)
{

	return ((kc_uint32_t)p[0] | (kc_uint32_t)p[1] << 8 |
	    (kc_uint32_t)p[2] << 16 | (kc_uint32_t)p[3] << 24);
}

static kc_uint64_t
kinst_le64(const kc_uint8_t *p)
{

	return ((kc_uint64_t)kinst_le32(p) |
	    (kc_uint64_t)kinst_le32(p + 4) << 32);
}

void
kinst_bytecopy(volatile kc_uint8_t *dst, const volatile kc_uint8_t *src,
    kc_uint32_t len)
{

	while (len-- > 0)
		*dst++ = *src++;
}

/*
 * Start a walk over the records of 'kf'; kinst_core_next() steps
 * it.
 */
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
 * Adler-32 (zlib's adler32()) in the low half of the digest, of 'len' more
 * bytes after those 'digest' covers: zlib's crc32(crc, ...) and
 * adler32(adler, ...) continued.  Bit by bit: a digest is computed once per
 * function, when its probes are made, never in probe context.
 */
kc_uint64_t
kinst_digest_more(kc_uint64_t digest, const kc_uint8_t *buf, kc_uint32_t len)
{
	kc_uint32_t crc, a, b, i;
	int k;

	crc = ~(kc_uint32_t)(digest >> 32);
	a = (kc_uint32_t)digest & 0xffff;
	b = (kc_uint32_t)(digest >> 16) & 0xffff;
	for (i = 0; i < len; i++) {
		crc ^= buf[i];
		for (k = 0; k < 8; k++)
			crc = (crc >> 1) ^ (0xedb88320U & (0U - (crc & 1)));
		a = (a + buf[i]) % 65521U;
		b = (b + a) % 65521U;
	}
	return ((kc_uint64_t)~crc << 32 | (kc_uint64_t)(b << 16 | a));
}

kc_uint64_t
kinst_func_digest(const kc_uint8_t *buf, kc_uint32_t len)
{

	return (kinst_digest_more(KINST_DIGEST_EMPTY, buf, len));
}

/*
 * Is 'copy' -- the live function's kf_size bytes, the fields relocations
 * fill zeroed -- with kf's instruction records what the table was made
 * from?  The digest covers the bytes and then the records, so a record
 * changed since generation (a length, a kind) fails it as a changed byte
 * does.  kinst_table_check() has put kf's records inside the table.
 */
int
kinst_func_digest_ok(const struct kinst_table *kt,
    const struct kinst_func *kf, const kc_uint8_t *copy)
{

	return (kinst_digest_more(kinst_func_digest(copy, kf->kf_size),
	    kt->kt_records + kf->kf_records, kf->kf_end - kf->kf_records) ==
	    kf->kf_digest);
}

static int
kinst_strcmp(const char *a, const char *b)
{

	while (*a != '\0' && *a == *b) {
		a++;
		b++;
	}
	return ((int)(unsigned char)*a - (int)(unsigned char)*b);
}

/*
 * Does the table hold together?  NULL, or what is wrong, for one console
 * line.  Checked once, when the module loads, so that nothing the glue and
 * the core read later points outside the table: every function's name
 * lies in the names, which end in a NUL; its records lie in the records,
 * in function order, and its instructions' lengths add up to its size
 * exactly; its first probe's index is the count of probes before it, and
 * the last count is the table's; functions are in address order (a binary
 * search looks them up); every name-order index is a function, in strcmp()
 * order (a binary search looks them up by name).  Whether the records say
 * the truth about the bytes is the digest's question, per function.
 */
const char *
kinst_table_check(const struct kinst_table *kt)
{
	struct kinst_func kf;
	struct kinst_walk kw;
	struct kinst_insn ki;
	const kc_uint8_t *r;
	kc_uint64_t addr;
	kc_uint32_t f, i, at, prev, probes, end;
	int rv;

	if (kt->kt_names_size == 0 ||
	    kt->kt_names[kt->kt_names_size - 1] != '\0')
		return ("its names do not end in a NUL");
	for (f = 0, at = 0, addr = 0; f < kt->kt_nfuncs; f++) {
		r = kt->kt_funcs + (kc_uint64_t)f * KINST_FUNC_RECSIZE;
		if (kinst_le32(r + KINST_FUNC_NAME_OFF) >= kt->kt_names_size)
			return ("a function's name lies outside its names");
		if (kinst_le32(r + KINST_FUNC_RECORDS_OFF) < at ||
		    kinst_le32(r + KINST_FUNC_RECORDS_OFF) >
		    kt->kt_records_size)
			return ("a function's records lie out of order or "
			    "outside its records");
		at = kinst_le32(r + KINST_FUNC_RECORDS_OFF);
		if (kinst_le64(r + KINST_FUNC_ADDR_OFF) < addr)
			return ("its functions are not in address order");
		addr = kinst_le64(r + KINST_FUNC_ADDR_OFF);
	}
	for (f = 0, probes = 0; f < kt->kt_nfuncs; f++) {
		kinst_func_get(kt, f, &kf);
		if (kf.kf_size == 0 || kf.kf_addr + kf.kf_size < kf.kf_addr)
			return ("a function has no bytes, or wraps around");
		if (kf.kf_first != probes)
			return ("a function's first probe is not the count "
			    "of those before it");
		end = 0;
		kinst_core_walk(kt, &kf, &kw);
		while ((rv = kinst_core_next(&kw, &ki)) > 0) {
			end = ki.ki_off + ki.ki_len;
			if (ki.ki_kind != KINST_R_REFUSED)
				probes++;
		}
		if (rv < 0 || end != kf.kf_size)
			return ("a function's instruction records do not "
			    "describe its bytes exactly");
	}
	if (probes != kt->kt_nprobes)
		return ("its probe count is not its functions'");
	for (i = 0, prev = 0; i < kt->kt_nfuncs; i++) {
		f = kinst_func_byname(kt, i);
		if (f >= kt->kt_nfuncs)
			return ("a name-order index is not a function");
		if (i > 0 && kinst_strcmp(kt->kt_names + kinst_le32(
		    kt->kt_funcs + (kc_uint64_t)prev * KINST_FUNC_RECSIZE +
		    KINST_FUNC_NAME_OFF), kt->kt_names + kinst_le32(
		    kt->kt_funcs + (kc_uint64_t)f * KINST_FUNC_RECSIZE +
		    KINST_FUNC_NAME_OFF)) > 0)
			return ("its name order is not strcmp() order");
		prev = f;
	}
	/* A jump's window stays inside the table, and holds no other head. */
	for (i = 0, end = 0; kt->kt_jump != 0 && i < kt->kt_nprobes; i++) {
		if (kt->kt_jump[i] == 0)
			continue;
		if (i < end || kt->kt_jump[i] > kt->kt_nprobes - i)
			return ("a jump head's window overlaps another's or "
			    "leaves the table");
		end = i + kt->kt_jump[i];
	}
	return (KINST_TABLE_OK);
}

/*
 * The next instruction of the walk: 1, or 0 at the function's end, or
 * -KINST_E_TABLE for a record the ISA cannot read or whose kind is none
 * of the table's.  Instructions are numbered as probes in walk order,
 * refused ones excepted.
 */
int
kinst_core_next(struct kinst_walk *kw, struct kinst_insn *ki)
{
	int code;

	if (kw->kw_off >= kw->kw_size || kw->kw_p >= kw->kw_end)
		return (0);
	ki->ki_nmask = 0;
	code = kinst_core_record(kw, ki);
	if (code < 0 || (code >= KINST_NKINDS && code != KINST_R_REFUSED))
		return (-KINST_E_TABLE);
	ki->ki_kind = (kc_uint8_t)code;
	ki->ki_off = kw->kw_off;
	ki->ki_probe = code == KINST_R_REFUSED ? 0 : kw->kw_probe++;
	kw->kw_off += ki->ki_len;
	return (1);
}

/*
 * Is 'copy', a writable copy of the live function's kf_size bytes, the
 * function the table was made from?  The fields relocations fill (each
 * record's ki_mask[]) are zeroed first, as the generator zeroed them.  0,
 * KINST_E_BYTES or KINST_E_TABLE.
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
			off = ki.ki_off + KINST_MASK_OFF(ki.ki_mask[i]);
			width = KINST_MASK_WIDTH(ki.ki_mask[i]);
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

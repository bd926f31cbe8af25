/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_funcs.h: the machine-independent part of a kinstkit kinst table --
 * its function records, their names and digests.
 *
 * Freestanding C99 with no system headers at all, like the rest of the
 * portable core: the FreeBSD module and the user-space harness compile the
 * same files.  A table is data the generator wrote as byte blobs (no
 * pointers, so no relocations in the module), read here field by field in
 * little-endian order: one KINST_FUNC_RECSIZE-byte record per function, at
 * the offsets kinst_encoding.h defines (rendered from the generator, their
 * one owner).  What the records say about each instruction is the ISA's
 * business (<arch>/kinst_core.c).
 */

#ifndef _KINST_FUNCS_H_
#define	_KINST_FUNCS_H_

#include "kinst_encoding.h"

typedef __UINT8_TYPE__		kc_uint8_t;
typedef __INT8_TYPE__		kc_int8_t;
typedef __UINT16_TYPE__		kc_uint16_t;
typedef __UINT32_TYPE__		kc_uint32_t;
typedef __INT32_TYPE__		kc_int32_t;
typedef __UINT64_TYPE__		kc_uint64_t;
typedef __INT64_TYPE__		kc_int64_t;
typedef __UINTPTR_TYPE__	kc_uintptr_t;

/* A generated table (kinst_table.c). */
struct kinst_table {
	kc_uint32_t		kt_nfuncs;
	kc_uint32_t		kt_nprobes;
	const kc_uint8_t	*kt_funcs;	/* kt_nfuncs function records */
	const kc_uint8_t	*kt_byname;	/* kt_nfuncs u32: indices, strcmp() order */
	const char		*kt_names;	/* NUL-terminated names */
	const kc_uint8_t	*kt_records;	/* per-instruction records */
	kc_uint32_t		kt_records_size;
	const char		*kt_image;	/* input path */
	const char		*kt_build_id;	/* hex, "" if none */
};

/* One function record, read out. */
struct kinst_func {
	kc_uint64_t	kf_addr;	/* st_value in the image */
	kc_uint64_t	kf_digest;	/* CRC-32 << 32 | Adler-32, relocated fields zeroed */
	const char	*kf_name;
	kc_uint32_t	kf_size;	/* st_size */
	kc_uint32_t	kf_records;	/* its records: kt_records[kf_records..kf_end) */
	kc_uint32_t	kf_end;
	kc_uint32_t	kf_first;	/* table index of its first probe */
	kc_uint32_t	kf_nprobes;
};

extern const struct kinst_table kinst_table;

void	kinst_func_get(const struct kinst_table *, kc_uint32_t,
	    struct kinst_func *);
long	kinst_func_at(const struct kinst_table *, kc_uint64_t);
kc_uint32_t kinst_func_byname(const struct kinst_table *, kc_uint32_t);
kc_uint64_t kinst_func_digest(const kc_uint8_t *, kc_uint32_t);
void	kinst_bytecopy(volatile kc_uint8_t *, const volatile kc_uint8_t *,
	    kc_uint32_t);

#endif /* !_KINST_FUNCS_H_ */

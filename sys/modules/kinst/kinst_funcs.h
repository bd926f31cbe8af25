/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_funcs.h: the machine-independent part of a kinstkit kinst table --
 * its function records, their names and digests.
 *
 * Freestanding C99 with no system headers at all, like the rest of the
 * portable core, but for <sys/types.h> in a FreeBSD kernel build: the
 * FreeBSD module, the user-space harness and the Linux guest compile the
 * same files.  A table is data the generator wrote as byte blobs (no
 * pointers, so no relocations in the module), read here field by field in
 * little-endian order: one KINST_FUNC_RECSIZE-byte record per function, at
 * the offsets kinst_encoding.h defines (rendered from the generator, their
 * one owner).  What the records say about each instruction is the ISA's
 * business (<arch>/kinst_core.c).
 *
 * Nothing in a table is trusted: kinst_table_check() holds its whole
 * structure to what the readers below assume, once, before anything reads
 * it, and a function's digest covers its instruction records as well as its
 * bytes (kinst_func_digest_ok()).
 */

#ifndef _KINST_FUNCS_H_
#define	_KINST_FUNCS_H_

#include "kinst_encoding.h"

/*
 * The core's integer types: the kernel's own (style(9)) in a FreeBSD kernel
 * build, which has <sys/types.h>; the compiler's in any other build (the
 * user-space harness, the Linux guest, `invoke build`'s offline check of
 * the core without a sys/ tree), which then needs no header at all.
 */
#if defined(_KERNEL) && defined(__FreeBSD__) && defined(__has_include)
#if __has_include(<sys/types.h>)
#define	KINST_SYS_TYPES
#endif
#endif

#ifdef KINST_SYS_TYPES
#include <sys/types.h>

typedef uint8_t			kc_uint8_t;
typedef int8_t			kc_int8_t;
typedef uint16_t		kc_uint16_t;
typedef uint32_t		kc_uint32_t;
typedef int32_t			kc_int32_t;
typedef uint64_t		kc_uint64_t;
typedef int64_t			kc_int64_t;
typedef uintptr_t		kc_uintptr_t;
#else
typedef __UINT8_TYPE__		kc_uint8_t;
typedef __INT8_TYPE__		kc_int8_t;
typedef __UINT16_TYPE__		kc_uint16_t;
typedef __UINT32_TYPE__		kc_uint32_t;
typedef __INT32_TYPE__		kc_int32_t;
typedef __UINT64_TYPE__		kc_uint64_t;
typedef __INT64_TYPE__		kc_int64_t;
typedef __UINTPTR_TYPE__	kc_uintptr_t;
#endif

/* A generated table (kinst_table.c). */
struct kinst_table {
	kc_uint32_t		kt_nfuncs;
	kc_uint32_t		kt_nprobes;
	const kc_uint8_t	*kt_funcs;	/* kt_nfuncs function records */
	const kc_uint8_t	*kt_byname;	/* u32 indices, name order */
	const char		*kt_names;	/* NUL-terminated names */
	kc_uint32_t		kt_names_size;	/* bytes of kt_names */
	const kc_uint8_t	*kt_records;	/* per-instruction records */
	kc_uint32_t		kt_records_size;
	const char		*kt_image;	/* input path */
	const char		*kt_build_id;	/* hex, "" if none */
	/*
	 * generate --jump (amd64), else NULL: per probe, how many probes
	 * a jump at it displaces and its detour fires (itself and those
	 * after it); 0: it stays a breakpoint (the proof refused it, or
	 * another jump displaces it).
	 */
	const kc_uint8_t	*kt_jump;
};

/* One function record, read out. */
struct kinst_func {
	kc_uint64_t	kf_addr;	/* st_value in the image */
	kc_uint64_t	kf_digest;	/* kinst_func_digest_ok() */
	const char	*kf_name;
	kc_uint32_t	kf_size;	/* st_size */
	kc_uint32_t	kf_records;	/* its records: [kf_records, kf_end) */
	kc_uint32_t	kf_end;
	kc_uint32_t	kf_first;	/* table index of its first probe */
	kc_uint32_t	kf_nprobes;
};

/*
 * A walk over a function's records: kinst_core_next() steps it, the ISA's
 * kinst_core_record() reading one instruction's record at a time into the
 * ISA's struct kinst_insn.  Every ISA gives that ki_off, ki_len, ki_kind,
 * ki_probe and the fields relocations fill: ki_nmask of them in ki_mask[],
 * each KINST_MASK(offset in the instruction, log2 of its width in bytes),
 * what kinst_core_digest_ok() zeroes.
 */
struct kinst_walk {
	const kc_uint8_t	*kw_p;
	const kc_uint8_t	*kw_end;
	kc_uint32_t		kw_off;
	kc_uint32_t		kw_size;
	kc_uint32_t		kw_probe;
};

struct kinst_insn;

#define	KINST_MASK(off, lgw)	((kc_uint8_t)((off) | (lgw) << 4))
#define	KINST_MASK_OFF(m)	((kc_uint32_t)(m) & 15)
#define	KINST_MASK_WIDTH(m)	(1U << (((kc_uint32_t)(m) >> 4) & 3))

/*
 * The ISA's reader of the record at kw_p, for kinst_core_next(): it moves
 * kw_p past the record and sets the instruction's length, masks and the
 * ISA's own fields; it returns the kind (KINST_R_REFUSED included), or -1
 * for a record it cannot read.  ki_nmask is 0 when it is called.
 */
int	kinst_core_record(struct kinst_walk *, struct kinst_insn *);

extern const struct kinst_table kinst_table;

#define	KINST_TABLE_OK	((const char *)0)	/* kinst_table_check(): sound */

void	kinst_func_get(const struct kinst_table *, kc_uint32_t,
	    struct kinst_func *);
long	kinst_func_at(const struct kinst_table *, kc_uint64_t);
kc_uint32_t kinst_func_byname(const struct kinst_table *, kc_uint32_t);
kc_uint64_t kinst_func_digest(const kc_uint8_t *, kc_uint32_t);
kc_uint64_t kinst_digest_more(kc_uint64_t, const kc_uint8_t *, kc_uint32_t);
int	kinst_func_digest_ok(const struct kinst_table *,
	    const struct kinst_func *, const kc_uint8_t *);
const char *kinst_table_check(const struct kinst_table *);
void	kinst_bytecopy(volatile kc_uint8_t *, const volatile kc_uint8_t *,
	    kc_uint32_t);
void	kinst_core_walk(const struct kinst_table *, const struct kinst_func *,
	    struct kinst_walk *);
int	kinst_core_next(struct kinst_walk *, struct kinst_insn *);
int	kinst_core_digest_ok(const struct kinst_table *,
	    const struct kinst_func *, kc_uint8_t *);

#endif /* !_KINST_FUNCS_H_ */

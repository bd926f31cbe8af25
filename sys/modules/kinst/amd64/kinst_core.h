/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core.h: the portable core of kinstkit's kinst provider, amd64.
 *
 * Freestanding C99 with no system headers at all, so that the same core
 * compiles into the FreeBSD module (kinst.c, kinst_isa.c) and into the
 * user-space harness that proves it on real code
 * (generator/run/harness_c/amd64/kinst_harness.c).  Fixed-width types come
 * from the compiler's predefined macros.
 *
 * This header is hand-written: it holds what no input changes, the layout
 * of the table's records, the register file and the core's entry points.
 * The encodings those records carry (KINST_PATCHVAL, KINST_TRAMP_SIZE, the
 * KINST_F_* flag bits and enum kinst_kind) are not written here but
 * rendered into kinst_encoding.h from generator/isa/amd64/probe_md.py, their
 * one owner, which also writes them into every generated table: C and
 * Python cannot disagree about them.
 */

#ifndef _KINST_CORE_H_
#define	_KINST_CORE_H_

#include "kinst_encoding.h"

typedef __UINT8_TYPE__		kc_uint8_t;
typedef __INT8_TYPE__		kc_int8_t;
typedef __UINT16_TYPE__		kc_uint16_t;
typedef __UINT32_TYPE__		kc_uint32_t;
typedef __INT32_TYPE__		kc_int32_t;
typedef __UINT64_TYPE__		kc_uint64_t;
typedef __INT64_TYPE__		kc_int64_t;
typedef __UINTPTR_TYPE__	kc_uintptr_t;

#define	KINST_TEMPLATE_SIZE	16

/* Errors returned by the core. */
#define	KINST_E_BYTES		1	/* live bytes differ from the table's */
#define	KINST_E_RANGE		2	/* target beyond +-2 GiB of the trampoline */
#define	KINST_E_KIND		3	/* entry is not of the kind asked for */

/*
 * The general-purpose registers in ModR/M order (rax, rcx, rdx, rbx, rsp,
 * rbp, rsi, rdi, r8-r15), so that reg1/reg2 index kr_gpr directly, plus
 * %rip and %rflags.  Each glue fills it from its own frame (a trapframe, a
 * ucontext) and copies back what the core changed.
 */
struct kinst_regs {
	kc_uint64_t	kr_gpr[16];
	kc_uint64_t	kr_rip;
	kc_uint64_t	kr_rflags;
};

/* One traced function: its link-time address and its slice of entries. */
struct kinst_func {
	const char	*kf_name;
	kc_uint64_t	kf_addr;	/* st_value in the image */
	kc_uint32_t	kf_size;	/* st_size */
	kc_uint32_t	kf_first;	/* index of its first entry */
	kc_uint32_t	kf_count;	/* number of entries */
};

/* One probe: kinst's struct kinst_probe_md, computed ahead of time. */
struct kinst_entry {
	kc_uint32_t	ke_func;	/* index into kt_funcs */
	kc_uint32_t	ke_off;		/* offset from the function; probe name */
	kc_uint8_t	ke_kind;	/* enum kinst_kind */
	kc_uint8_t	ke_flags;	/* KINST_F_* */
	kc_uint8_t	ke_instlen;	/* original length */
	kc_uint8_t	ke_tinstlen;	/* length in the trampoline */
	kc_uint8_t	ke_dispoff;	/* rel32 hole in ke_template */
	kc_int8_t	ke_reg1;	/* call operand base, -1: none */
	kc_int8_t	ke_reg2;	/* call operand index, -1: none */
	kc_uint8_t	ke_scale;	/* call operand scale (shift) */
	kc_int64_t	ke_disp;	/* displacement (widened jumps: adjusted) */
	kc_uint8_t	ke_orig[KINST_TEMPLATE_SIZE];	/* bytes to find at the patch point */
	kc_uint8_t	ke_template[KINST_TEMPLATE_SIZE]; /* trampoline instruction */
};

/* A generated table: functions sorted by address, entries by offset. */
struct kinst_table {
	const struct kinst_func		*kt_funcs;
	kc_uint32_t			kt_nfuncs;
	const struct kinst_entry	*kt_entries;
	kc_uint32_t			kt_nentries;
	const char			*kt_image;	/* input path */
	const char			*kt_build_id;	/* hex, "" if none */
};

extern const struct kinst_table kinst_table;

long	kinst_core_lookup(const struct kinst_table *, kc_uint64_t);
int	kinst_core_check(const struct kinst_entry *, const volatile kc_uint8_t *);
int	kinst_core_tramp_fill(const struct kinst_entry *, kc_uintptr_t,
	    volatile kc_uint8_t *);
int	kinst_core_call(const struct kinst_entry *, kc_uintptr_t,
	    const struct kinst_regs *, kc_uint64_t *, kc_uint64_t *);
int	kinst_core_is_call(const struct kinst_entry *);
void	kinst_core_bytecopy(volatile kc_uint8_t *, const volatile kc_uint8_t *,
	    kc_uint32_t);

#endif /* !_KINST_CORE_H_ */

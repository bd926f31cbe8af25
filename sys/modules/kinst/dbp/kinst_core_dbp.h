/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core_dbp.h: what the portable cores of the "double breakpoint"
 * ISAs, arm64 and riscv, have in common: the walk over a function's
 * one-byte records and the interface every such core
 * offers to its glue (the FreeBSD module's kinst_isa.c and dbp/, and the
 * user-space harness).  dbp/kinst_core_dbp.c implements the shared part;
 * <arch>/kinst_core.c the rest, including kinst_core_record_byte(), the one
 * hook the shared record reader needs.
 *
 * Included by <arch>/kinst_core.h after it has defined KINST_INSN_SIZE,
 * KINST_PATCH_SIZE, struct kinst_regs and struct kinst_md.  Freestanding
 * C99 with no system headers, like the rest of the core.
 *
 * A hit resumes one of two ways: the instruction runs in a trampoline
 * [instruction][breakpoint] and the trampoline's own breakpoint sends the
 * thread back to the next original instruction, or the instruction is
 * emulated over a struct kinst_regs.  Unlike stock kinst, no per-CPU state
 * ties the two breakpoints together: the glue knows a trampoline's
 * breakpoint by its address, so a thread may be interrupted, preempted or
 * migrated while in a trampoline, or leave it through an exception.
 */

#ifndef _KINST_CORE_DBP_H_
#define	_KINST_CORE_DBP_H_

/* Errors returned by the core. */
#define	KINST_E_BYTES		1	/* live bytes are not the table's */
#define	KINST_E_RANGE		2	/* unused by these ISAs */
#define	KINST_E_KIND		3	/* not of the kind asked for */
#define	KINST_E_TABLE		4	/* a record contradicts the bytes */

/* One instruction of a function, as its record describes it. */
struct kinst_insn {
	kc_uint32_t	ki_off;		/* from the function; the probe name */
	kc_uint32_t	ki_probe;	/* table index, unless REFUSED */
	kc_uint8_t	ki_len;		/* arm64: 4; riscv: 2 or 4 */
	kc_uint8_t	ki_kind;	/* enum kinst_kind, KINST_R_REFUSED */
	kc_uint8_t	ki_nmask;	/* 1: a relocation fills part */
	kc_uint8_t	ki_mask[1];	/* KINST_MASK(): all of it */
};

/*
 * The immediate field of a table kind, its row of KINST_IMM_LAYOUTS
 * (kinst_encoding.h, rendered from the ISA's IMM_LAYOUTS in
 * generator/isa/<arch>/tables.py, which the generator's relocation code
 * writes fields through too).
 */
struct kinst_imm_layout {
	kc_uint8_t	kl_bits;	/* width; bit kl_bits - 1: the sign */
	kc_uint16_t	kl_scale;	/* bytes one unit of it counts */
	kc_uint8_t	kl_npieces;	/* 0: the kind has no immediate */
	/* { instruction bit, immediate bit, width } of each run of bits */
	kc_uint8_t	kl_pieces[KINST_IMM_MAXPIECES][3];
};

/* dbp/kinst_core_dbp.c */
int	kinst_core_is_emulated(const struct kinst_md *);
int	kinst_core_patch(const struct kinst_md *, kc_uint8_t *);
kc_int64_t kinst_core_sext(kc_uint64_t, int);
kc_int64_t kinst_core_imm(kc_uint32_t, int);
kc_uint32_t kinst_core_get(const volatile kc_uint8_t *, int);
void	kinst_core_put(volatile kc_uint8_t *, kc_uint32_t, int);

/*
 * <arch>/kinst_core.c.  kinst_core_record_byte(): the kind or
 * KINST_R_REFUSED a record byte holds, and in *len the length of its
 * instruction; -1 for a byte with bits the ISA's records never set.
 * kinst_core_length(): the length the instruction at a pointer announces
 * (0: none this ISA has).  kinst_core_dissect(): kinst's rule for one
 * instruction (0, a KINST_RF_* refusal, or -1 for a length it is not).
 * dbp/kinst_core_dbp.c: kinst_core_derive(), on top of both.
 */
int	kinst_core_record_byte(kc_uint8_t, kc_uint8_t *);
int	kinst_core_length(const volatile kc_uint8_t *);
int	kinst_core_dissect(const volatile kc_uint8_t *, kc_uint32_t,
	    struct kinst_md *);
int	kinst_core_derive(const struct kinst_insn *,
	    const volatile kc_uint8_t *, struct kinst_md *);
int	kinst_core_tramp_fill(const struct kinst_md *, volatile kc_uint8_t *);
kc_uintptr_t kinst_core_resume(const struct kinst_md *, kc_uintptr_t);
int	kinst_core_emulate(const struct kinst_md *, kc_uintptr_t,
	    struct kinst_regs *);

#endif /* !_KINST_CORE_DBP_H_ */

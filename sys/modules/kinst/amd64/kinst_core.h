/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core.h: the portable core of kinstkit's kinst provider, amd64.
 *
 * Freestanding C99 with no system headers at all, so that the same core
 * compiles into the FreeBSD module (kinst.c, kinst_isa.c), into the
 * user-space harness that proves it on real code
 * (generator/run/harness_c/) and into the analysis, whose verdict on
 * every instruction is kinst_core_dissect()'s
 * (generator/isa/amd64/accel/kk_walk.c).
 *
 * A table keeps one small record per instruction (kinst_encoding.h names the
 * codes; generator/isa/amd64/table.py writes them): its length, how a hit
 * resumes, and where a %rip-relative displacement is.  Everything kinst's
 * struct kinst_probe_md holds besides is derived here from the live
 * instruction, when a probe is made, after kinst_core_digest_ok() has shown
 * the live function to be the one the table was made from.  Fields a
 * relocation fills (a module's calls into the kernel, its references to
 * kernel data) are read from the live bytes, where the loader put their
 * final values.
 */

#ifndef _KINST_CORE_H_
#define	_KINST_CORE_H_

#include "kinst_funcs.h"

#define	KINST_TEMPLATE_SIZE	16
#define	KINST_MAX_INSN		15

/* Errors returned by the core. */
#define	KINST_E_BYTES		1	/* live bytes differ from the table's */
#define	KINST_E_RANGE		2	/* beyond +-2 GiB of the trampoline */
#define	KINST_E_KIND		3	/* not of the kind asked for */
#define	KINST_E_TABLE		4	/* a record contradicts the bytes */

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

/* One instruction of a function, as its record describes it. */
struct kinst_insn {
	kc_uint32_t	ki_off;		/* from the function; the probe name */
	kc_uint32_t	ki_probe;	/* table index, unless REFUSED */
	kc_uint8_t	ki_len;
	kc_uint8_t	ki_kind;	/* enum kinst_kind, KINST_R_REFUSED */
	kc_uint8_t	ki_dispoff;	/* riprel: where the rel32 is */
	kc_uint8_t	ki_nmask;	/* relocated fields in ki_mask */
	kc_uint8_t	ki_mask[KINST_MAX_INSN]; /* KINST_MASK() */
};

/* kinst's struct kinst_probe_md for one live instruction. */
struct kinst_md {
	kc_uint8_t	km_kind;	/* enum kinst_kind */
	kc_uint8_t	km_flags;	/* KINST_F_* */
	kc_uint8_t	km_instlen;	/* original length */
	kc_uint8_t	km_tinstlen;	/* length in the trampoline */
	kc_uint8_t	km_dispoff;	/* rel32 hole in km_template */
	kc_int8_t	km_reg1;	/* call operand base, -1: none */
	kc_int8_t	km_reg2;	/* call operand index, -1: none */
	kc_uint8_t	km_scale;	/* call operand scale (shift) */
	kc_int64_t	km_disp;	/* displacement (widened: adjusted) */
	kc_uint8_t	km_template[KINST_TEMPLATE_SIZE]; /* trampoline's */
};

int	kinst_core_dissect(const kc_uint8_t *, kc_uint32_t, struct kinst_md *);
int	kinst_core_derive(const struct kinst_insn *,
	    const volatile kc_uint8_t *, struct kinst_md *);
kc_uint64_t kinst_core_branch_target(const struct kinst_md *, kc_uintptr_t);
int	kinst_core_tramp_fill(const struct kinst_md *, kc_uintptr_t,
	    kc_uintptr_t, volatile kc_uint8_t *);
int	kinst_core_tramp_fill_to(const struct kinst_md *, kc_uintptr_t,
	    kc_uintptr_t, volatile kc_uint8_t *, kc_uint64_t);
int	kinst_core_call(const struct kinst_md *, kc_uintptr_t,
	    const struct kinst_regs *, kc_uint64_t *, kc_uint64_t *);
int	kinst_core_is_call(const struct kinst_md *);

#endif /* !_KINST_CORE_H_ */

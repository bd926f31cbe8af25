/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core.h: the portable core of kinstkit's kinst provider, riscv.
 *
 * Freestanding C99 with no system headers at all, so that the same core
 * compiles into the FreeBSD module (kinst_isa.c) and into the user-space
 * harness that proves it on real code under qemu-riscv64
 * (generator/run/harness_c/dbp/kinst_harness.c).
 *
 * A table keeps one byte per instruction (kinst_encoding.h names the codes;
 * generator/isa/riscv/table.py writes them): its length (2 or 4), how a
 * hit resumes, and whether a relocation fills part of it.  What the
 * emulation needs besides is derived here from the live instruction, once
 * the function's digest has shown the live bytes to be the analysed ones,
 * and the instruction must be of the recorded kind.
 *
 * A hit resumes one of two ways, as in stock riscv kinst ("double
 * breakpoint"): the instruction runs in a trampoline [insn][c.nop][ebreak]
 * and the second ebreak sends the thread back to the next original
 * instruction, or it is emulated over a struct kinst_regs.  Unlike stock
 * kinst, no per-CPU state ties the two breakpoints together: the glue
 * knows a trampoline's ebreak by its address, so a thread may be
 * interrupted, preempted or migrated while in a trampoline, or leave it
 * through an exception.
 */

#ifndef _KINST_CORE_H_
#define	_KINST_CORE_H_

#include "kinst_funcs.h"

#define	KINST_INSN_SIZE		4
#define	KINST_INSN_C_SIZE	2
#define	KINST_C_NOP		0x0001

/* Errors returned by the core. */
#define	KINST_E_BYTES		1	/* live bytes differ from the table's */
#define	KINST_E_RANGE		2	/* unused on riscv */
#define	KINST_E_KIND		3	/* not of the kind asked for */
#define	KINST_E_TABLE		4	/* a record contradicts the live bytes */

/*
 * The registers an emulation reads or writes: x0-x31 (kr_x[0] is never
 * read: x0 is zero) and pc.  Each glue fills it from its own frame (a
 * trapframe, a ucontext) and copies back what changed.
 */
struct kinst_regs {
	kc_uint64_t	kr_x[32];
	kc_uint64_t	kr_pc;
};

/* One instruction of a function, as its record describes it. */
struct kinst_insn {
	kc_uint32_t	ki_off;		/* from the function; the probe name */
	kc_uint32_t	ki_probe;	/* table index, if ki_kind is not REFUSED */
	kc_uint8_t	ki_len;		/* 2 or 4 */
	kc_uint8_t	ki_kind;	/* enum kinst_kind, or KINST_R_REFUSED */
	kc_uint8_t	ki_masked;	/* a relocation fills part of it */
};

/* A walk over a function's records. */
struct kinst_walk {
	const kc_uint8_t	*kw_p;
	const kc_uint8_t	*kw_end;
	kc_uint32_t		kw_off;
	kc_uint32_t		kw_size;
	kc_uint32_t		kw_probe;
};

/* What a hit on one live instruction needs: kinst's kp_md, decoded once. */
struct kinst_md {
	kc_uint32_t	km_insn;	/* the instruction (instlen bytes) */
	kc_int64_t	km_imm;		/* offset, sign-extended */
	kc_uint8_t	km_kind;	/* enum kinst_kind */
	kc_uint8_t	km_instlen;	/* 2 or 4 */
	kc_uint8_t	km_rd;		/* 0 (x0): no write; 0xff: none */
	kc_uint8_t	km_rs1;		/* 0xff: none */
	kc_uint8_t	km_rs2;		/* 0xff: none */
	kc_uint8_t	km_funct3;	/* branch condition (c.beqz 0, c.bnez 1) */
};

void	kinst_core_walk(const struct kinst_table *, const struct kinst_func *,
	    struct kinst_walk *);
int	kinst_core_next(struct kinst_walk *, struct kinst_insn *);
int	kinst_core_digest_ok(const struct kinst_table *,
	    const struct kinst_func *, kc_uint8_t *);
int	kinst_core_derive(const struct kinst_insn *,
	    const volatile kc_uint8_t *, struct kinst_md *);
int	kinst_core_is_emulated(const struct kinst_md *);
int	kinst_core_tramp_fill(const struct kinst_md *, volatile kc_uint8_t *);
int	kinst_core_patch(const struct kinst_md *, kc_uint8_t *);
kc_uintptr_t kinst_core_resume(const struct kinst_md *, kc_uintptr_t);
int	kinst_core_emulate(const struct kinst_md *, kc_uintptr_t,
	    struct kinst_regs *);

#endif /* !_KINST_CORE_H_ */

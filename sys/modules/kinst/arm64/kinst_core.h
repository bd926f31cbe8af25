/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core.h: the portable core of kinstkit's kinst provider, arm64.
 *
 * Freestanding C99 with no system headers at all, so that the same core
 * compiles into the FreeBSD module (kinst_isa.c) and into the user-space
 * harness that proves it on real code under qemu-aarch64
 * (generator/run/harness_c/dbp/kinst_harness.c).
 *
 * A table keeps one byte per instruction word (kinst_encoding.h names the
 * codes; generator/isa/arm64/table.py writes them): how a hit resumes, and
 * whether a relocation fills part of the word.  What the emulation needs
 * besides is derived here from the live word, once the function's digest
 * has shown the live bytes to be the analysed ones, and the word must be
 * of the recorded kind.
 *
 * A hit resumes one of two ways, as in stock arm64 kinst ("double
 * breakpoint"): the word runs in a trampoline [word][brk] and the second
 * brk sends the thread back to the next original word, or the word is
 * emulated over a struct kinst_regs.  Unlike stock kinst, no per-CPU state
 * ties the two breakpoints together: the glue knows a trampoline's brk by
 * its address, so a thread may be interrupted, preempted or migrated while
 * in a trampoline, or leave it through an exception.
 */

#ifndef _KINST_CORE_H_
#define	_KINST_CORE_H_

#include "kinst_funcs.h"

#define	KINST_INSN_SIZE		4

/* Errors returned by the core. */
#define	KINST_E_BYTES		1	/* live bytes differ from the table's */
#define	KINST_E_RANGE		2	/* unused on arm64 */
#define	KINST_E_KIND		3	/* not of the kind asked for */
#define	KINST_E_TABLE		4	/* a record contradicts the live word */

/* struct kinst_md km_flags */
#define	KINST_MD_NONZERO	0x01	/* cbnz, tbnz */
#define	KINST_MD_LINK		0x02	/* bl, blr: x30 gets the return address */
#define	KINST_MD_SIGNED		0x04	/* ldrsw */

/*
 * The registers an emulation reads or writes: x0-x30, sp, pc and the
 * condition flags (N, Z, C, V in bits 31-28, where SPSR and the signal
 * frame's pstate keep them).  Register 31 of a word is xzr for every
 * emulated class, never sp.  Each glue fills it from its own frame (a
 * trapframe, whose x30 is tf_lr; a ucontext) and copies back what changed.
 */
struct kinst_regs {
	kc_uint64_t	kr_x[31];
	kc_uint64_t	kr_sp;
	kc_uint64_t	kr_pc;
	kc_uint64_t	kr_nzcv;
};

/* One word of a function, as its record describes it. */
struct kinst_insn {
	kc_uint32_t	ki_off;		/* from the function; the probe name */
	kc_uint32_t	ki_probe;	/* table index, if ki_kind is not REFUSED */
	kc_uint8_t	ki_len;		/* always 4 */
	kc_uint8_t	ki_kind;	/* enum kinst_kind, or KINST_R_REFUSED */
	kc_uint8_t	ki_masked;	/* a relocation fills part of the word */
};

/* A walk over a function's records. */
struct kinst_walk {
	const kc_uint8_t	*kw_p;
	const kc_uint8_t	*kw_end;
	kc_uint32_t		kw_off;
	kc_uint32_t		kw_size;
	kc_uint32_t		kw_probe;
};

/* What a hit on one live word needs: kinst's kp_md, decoded once. */
struct kinst_md {
	kc_uint32_t	km_insn;	/* the word (kp_savedval) */
	kc_int64_t	km_imm;		/* byte offset (adrp: page offset) */
	kc_uint8_t	km_kind;	/* enum kinst_kind */
	kc_uint8_t	km_reg;		/* Rt, Rd or Rn; 31 is xzr */
	kc_uint8_t	km_cond;	/* b.cond */
	kc_uint8_t	km_bit;		/* tbz, tbnz: 0-63 */
	kc_uint8_t	km_size;	/* cbz: 4 or 8 bytes compared; ldr: loaded */
	kc_uint8_t	km_flags;	/* KINST_MD_* */
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

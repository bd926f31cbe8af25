/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core.h: the portable core of kinstkit's kinst provider, arm64.
 *
 * Freestanding C99 with no system headers at all, so that the same core
 * compiles into the FreeBSD module (kinst_isa.c) and into the user-space
 * harness that proves it on real code under qemu-aarch64
 * (generator/run/harness_c/).  What arm64 shares with riscv, the other
 * "double breakpoint" ISA -- the walk over the records, the digest check,
 * the interface to the glue -- is ../dbp/kinst_core_dbp.[ch].
 *
 * A table keeps one byte per instruction word (kinst_encoding.h names the
 * codes; generator/isa/arm64/table.py writes them): how a hit resumes, and
 * whether a relocation fills part of the word.  What the emulation needs
 * besides is derived here from the live word, once the function's digest
 * has shown the live bytes to be the analysed ones, and the word must be
 * of the recorded kind.  A hit either runs the word in a trampoline
 * [word][brk], as in stock arm64 kinst, or emulates it over a struct
 * kinst_regs.
 */

#ifndef _KINST_CORE_H_
#define	_KINST_CORE_H_

#include "kinst_funcs.h"

#define	KINST_INSN_SIZE		4
#define	KINST_MAX_INSN		4
#define	KINST_INSN_ALIGN	4	/* where an instruction may start */
#define	KINST_PATCH_SIZE	4	/* brk over the whole word */

/* struct kinst_md km_flags: KINST_MD_* of kinst_encoding.h (FLAG_BITS). */

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
	kc_uint8_t	km_class;	/* kinst's enum kinst_instr: KINST_C_* */
};

#include "kinst_core_dbp.h"

#endif /* !_KINST_CORE_H_ */

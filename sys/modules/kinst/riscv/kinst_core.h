/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core.h: the portable core of kinstkit's kinst provider, riscv.
 *
 * Freestanding C99 with no system headers at all, so that the same core
 * compiles into the FreeBSD module (kinst_isa.c) and into the user-space
 * harness that proves it on real code under qemu-riscv64
 * (generator/run/harness_c/).  What riscv shares with arm64, the other
 * "double breakpoint" ISA -- the walk over the records, the digest check,
 * the interface to the glue -- is ../dbp/kinst_core_dbp.[ch].
 *
 * A table keeps one byte per instruction (kinst_encoding.h names the codes;
 * generator/isa/riscv/table.py writes them): its length (2 or 4), how a
 * hit resumes, and whether a relocation fills part of it.  What the
 * emulation needs besides is derived here from the live instruction, once
 * the function's digest has shown the live bytes to be the analysed ones,
 * and the instruction must be of the recorded kind.  A hit either runs the
 * instruction in a trampoline [insn][c.nop][ebreak], as in stock riscv
 * kinst, or emulates it over a struct kinst_regs.
 *
 * A probe's breakpoint is c.ebreak over the first halfword, whatever the
 * instruction's length.  A 4-byte instruction may sit at an address that
 * is only 2-byte aligned (after a compressed one), where a 4-byte ebreak
 * would take two stores and a hart fetching between them would run half of
 * each; one aligned 16-bit store is atomic, and the CPU, seeing a 16-bit
 * encoding, traps without reading the rest.
 */

#ifndef _KINST_CORE_H_
#define	_KINST_CORE_H_

#include "kinst_funcs.h"

#define	KINST_INSN_SIZE		4
#define	KINST_INSN_C_SIZE	2
#define	KINST_MAX_INSN		4
#define	KINST_INSN_ALIGN	2	/* where an instruction may start */
#define	KINST_C_NOP		0x0001
#define	KINST_PATCH_SIZE	2	/* c.ebreak over the first halfword */

/*
 * The registers an emulation reads or writes: x0-x31 (kr_x[0] is never
 * read: x0 is zero) and pc.  Each glue fills it from its own frame (a
 * trapframe, a ucontext) and copies back what changed.
 */
struct kinst_regs {
	kc_uint64_t	kr_x[32];
	kc_uint64_t	kr_pc;
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

#include "kinst_core_dbp.h"

#endif /* !_KINST_CORE_H_ */

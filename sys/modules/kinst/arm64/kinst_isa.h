/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_isa.h: the interface between kinstkit's machine-independent kinst
 * glue (kinst.c) and its arm64 part (kinst_isa.c).  Include it after the
 * kernel headers and kinst_core.h.  riscv/kinst_isa.h declares the same
 * names, so kinst.c uses them without knowing the ISA.
 *
 * kinst.c owns the probes: it finds a table function in the running image,
 * checks its bytes against the table (kinst_core_digest_ok), walks its
 * records (kinst_core_next) and, for each probe it makes, embeds a struct
 * kinst_isa_probe and calls kinst_isa_prepare() once, with kinst_sx held,
 * before the probe can be armed.  It arms and disarms with kinst_isa_arm()
 * and kinst_isa_disarm(), adds kinst_invop() with dtrace_invop_add(), and
 * at unload, after dtrace_invop_remove() and dtrace_sync(), calls
 * kinst_isa_fini().  In return it provides the two functions the
 * breakpoint handler calls back: kinst_isa_lookup() (the armed probe whose
 * patch point is this address, without a lock) and kinst_isa_fire() (the
 * dtrace_probe() call for it).
 *
 * The double breakpoint: an instruction kinstkit does not emulate runs in a
 * trampoline [instruction][brk], and the trampoline's brk sends the thread
 * back to the instruction after the patch point.  The ISA part knows a
 * trampoline's brk by its address alone, so there is no per-CPU state and
 * interrupts stay as the interrupted code had them (stock kinst keeps the
 * probe in per-CPU state and masks interrupts until the second brk).
 */

#ifndef _KINST_ISA_H_
#define	_KINST_ISA_H_

#define	KINST_ISA_NOP	0xd503201f	/* NOP_INSTR: ELR += 4 follows */

/* What the ISA part keeps per probe; kinst.c embeds it in its probe. */
struct kinst_isa_probe {
	struct kinst_md	kip_md;		/* from the verified live instruction */
	uint8_t		*kip_patchpoint;	/* live address of the instruction */
	uint8_t		*kip_tramp;	/* its trampoline; NULL: emulated */
	uint32_t	kip_savedval;	/* the instruction, to disarm */
};

/* kinst.c */
struct kinst_isa_probe	*kinst_isa_lookup(uintptr_t);
void			kinst_isa_fire(struct kinst_isa_probe *,
			    struct trapframe *);

/* arm64/kinst_isa.c */
int	kinst_invop(uintptr_t, struct trapframe *, uintptr_t);
int	kinst_isa_prepare(struct kinst_isa_probe *, const struct kinst_insn *,
	    uint8_t *);
void	kinst_isa_arm(struct kinst_isa_probe *);
void	kinst_isa_disarm(struct kinst_isa_probe *);
void	kinst_isa_fini(void);

#endif /* !_KINST_ISA_H_ */

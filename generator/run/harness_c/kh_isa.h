/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_isa.h: what the harness glue's machine-independent part
 * (kinst_harness.c) and its ISA part share, as sys/modules/kinst/kinst.h
 * is for the module: the per-copy state, and the functions each side calls
 * of the other.  The ISA part is <arch>/kh_isa_<arch>.c, and on arm64 and
 * riscv ("double breakpoint") dbp/kh_dbp.c besides, which implements the
 * breakpoint handler both share.  Include it after <signal.h>, <stddef.h>,
 * <stdint.h> and kinst_core.h.
 *
 * kinst_harness.c owns the run: the rtld audit entry points, checking each
 * table function's live bytes against its digest and deriving its probes'
 * metadata with the core, the report and the hit counters, placing a copy's
 * probes one executable segment at a time, and passing a trap that is not
 * ours on.  The ISA part owns what differs: raw system calls, the SIGTRAP
 * handler (probe context: it calls nothing but the core, the two functions
 * of kinst_harness.c below and raw system calls), where trampolines may
 * be, filling one and writing a breakpoint.
 */

#ifndef _KH_ISA_H_
#define	_KH_ISA_H_

#define	KH_MAX_INST	8		/* live copies of the image (dlmopen) */

/* Per-probe, per-copy state. */
#define	KH_S_NONE	0		/* not (yet) placed */
#define	KH_S_READY	1		/* checked, trampoline filled */
#define	KH_S_PLACED	2		/* breakpoint written: traps are ours */
#define	KH_S_REFUSED	3		/* see the refusal lines */

/* A placed probe, for the handler's binary search by live address. */
struct kh_site {
	uintptr_t	ks_addr;
	uint32_t	ks_probe;	/* table index */
};

/* One mapped copy of the image. */
struct kh_inst {
	uintptr_t	ki_bias;	/* live address - link address */
	uintptr_t	ki_lo;		/* live text range, for the handler */
	uintptr_t	ki_hi;
	uint8_t		*ki_tramp;	/* KINST_TRAMP_SIZE bytes per probe */
	uint8_t		*ki_state;	/* KH_S_* per probe */
	struct kinst_md	*ki_md;		/* per probe, from the live bytes */
	uintptr_t	*ki_addr;	/* per probe, its live patch point */
	struct kh_site	*ki_sites;	/* placed probes, by address */
	uint32_t	ki_nsites;
	uint32_t	ki_placed;	/* probes placed, breakpoint or jump */
	uint32_t	ki_jumps;	/* jump probes placed (detours) */
	uint32_t	ki_jumped;	/* probes a detour fires */
	int		ki_closed;
};

/*
 * kinst_harness.c.  kh_insts[0, kh_ninst) are the copies mapped so far;
 * kh_ninst is published with release order once a copy is set up.
 * kh_hits counts per table entry, all copies and processes together.
 * kh_probe_at(): the table index of the probe placed at live address 'pc'
 * in the newest copy that has one there (a closed copy may share its
 * addresses), and that copy in *kip; -1 if none.  kh_pass_on(): hand a
 * trap that is not ours to the previous SIGTRAP disposition.
 */
extern struct kh_inst	kh_insts[KH_MAX_INST];
extern volatile int	kh_ninst;
extern uint64_t		*kh_hits;
long	kh_probe_at(uintptr_t, struct kh_inst **);
void	kh_pass_on(int, siginfo_t *, void *);

/*
 * kh_hit(): the ISA's handler calls it at each hit of a probe, after
 * counting the hit and before the probe's instruction runs, with the
 * probe's link address and the trap's ucontext_t.  kinst_harness.c defines
 * it weak and empty; an optional part of the library defines it when built
 * in (vars/kh_vars.c: the variable readings).  A direct call, so that probe
 * context stays free of indirect calls.  It may read, never change, the
 * context.
 */
void	kh_hit(uintptr_t, void *);

/*
 * Jump probes (harness --jump), an optional part of the library
 * (jump/kh_jump_amd64.c); kinst_harness.c defines all three weak and
 * empty, so that a build without it places breakpoints only.
 * kh_jump_room(): the bytes its detours need after a copy's trampolines
 * (KINST_TRAMP_SIZE per probe) in the same block.  kh_jump_prepare(): fill
 * the detours of copy 'ki' once its probes are ready and before the block
 * is made executable.  kh_jump_place(): with the text writable, place the
 * jump of the ready probe 'probe' at 'live' if a detour was filled for it,
 * mark every probe the detour fires placed, and return how many it fires;
 * 0 leaves the probe to its breakpoint.
 */
size_t	kh_jump_room(uint32_t);
void	kh_jump_prepare(struct kh_inst *);
uint32_t kh_jump_place(struct kh_inst *, uint32_t, uintptr_t);

/*
 * <arch>/kh_isa_<arch>.c, or dbp/kh_dbp.c.  kh_isa_trap_code: the si_code
 * a real breakpoint instruction raises SIGTRAP with (the kernel never lets
 * a process ignore that one).  kh_isa_tramp_alloc(): 'len' bytes of
 * writable memory for the trampolines of the copy whose text is at
 * [lo, hi), where this ISA's trampolines can reach it; NULL if there is
 * none.  kh_isa_tramped(): whether a probe runs its instruction in its
 * trampoline (else it is emulated).  kh_isa_prepare(): fill the trampoline
 * 'tramp' (NULL: none could be had) of the probe at live address 'live';
 * NULL when it is ready, else why it is refused (maybe written to 'why').
 * kh_isa_patch(): write the probe's breakpoint at 'live'.
 */
extern const int kh_isa_trap_code;
long	kh_isa_syscall4(long, long, long, long, long);
void	kh_isa_trap(int, siginfo_t *, void *);
uint8_t	*kh_isa_tramp_alloc(uintptr_t, uintptr_t, size_t);
int	kh_isa_tramped(const struct kinst_md *);
const char *kh_isa_prepare(const struct kinst_md *, uintptr_t, uint8_t *,
	    char *, size_t);
void	kh_isa_patch(const struct kinst_md *, uintptr_t);

#endif /* !_KH_ISA_H_ */

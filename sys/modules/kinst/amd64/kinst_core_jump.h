/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_core_jump.h: jump probes (issue 22), the part of the portable core
 * every glue shares: the FreeBSD module (kinst_isa.c), the user-space
 * harness (generator/run/harness_c/jump/kh_jump_amd64.c) and the ring-0
 * Linux guest.  Freestanding C99, no system headers, like kinst_core.h.
 *
 * A jump probe replaces the int3 at a probe's first byte with a 5-byte
 * "jmp rel32" (KINST_JUMP_SIZE) to a detour.  The jump displaces the probed
 * instruction and those after it until 5 bytes are covered; the
 * ahead-of-time proof (generator/analysis/jumpsafe.py) has shown that
 * nothing enters those bytes but at the first, and the table says per head
 * how many probes it displaces ('k').  The detour is k chunks of
 * KINST_JUMP_CHUNK bytes, one per displaced probe, in that order; chunk j:
 *
 *   the stub: step over KINST_JUMP_REDZONE bytes below %rsp, push %rflags
 *     and the 15 other general registers (struct kinst_jframe), cld, align
 *     the stack, [KINST_JUMP_FPU: fxsave64 of the x87/SSE state], call
 *     handler(frame, arg, fx) (fx: the fxsave area, or NULL), undo it all;
 *   the displaced instruction relocated by kinst_core_tramp_fill_to(),
 *     resuming at chunk j + 1, or for the last after the displaced bytes;
 *     or, a last direct call, its emulation (push the original return
 *     address, jmp *0(%rip) to the target; no flag changes).
 *
 * So each displaced probe fires just before its own instruction runs, and
 * a taken branch among them leaves the detour as it would have left the
 * window.
 *
 * The live protocol's rules.  Nothing but the head enters the window (the
 * proof), and once the head is a breakpoint nothing enters it at all; but
 * the breakpoint's own trampoline resumes inside the window, after the
 * head.  So: from before the tail (bytes 1-4) may hold the rel32 until it
 * is the original again, a breakpoint hit at the head resumes in the
 * detour (KINST_JS_VIA); after every CPU has synced, no thread may be
 * stopped with its PC inside the tail or inside the head's trampoline
 * (both would resume into the rel32; kinst_core_jump_quiet()); only then
 * is the tail written, and the opcode last.  Removal writes int3 first,
 * then the original tail; a thread in the detour finishes it unaided.
 *
 * The handler runs in whatever context the probed code ran in (a kernel:
 * interrupts as they were, preemptible); it must be safe there.
 *
 * A glue, per head:
 *   1. kinst_core_jump_window() over the k displaced lengths;
 *   2. kinst_core_jump_fill() for each chunk, into memory within rel32
 *      reach that stays mapped and unchanged while a thread may be in it;
 *   3. kinst_core_jump_bytes(): the five bytes of the jump;
 *   4. the live protocol: kinst_core_jump_run() over kinst_jump_place[]
 *      and, to remove, kinst_jump_remove[], with the glue's struct
 *      kinst_jops doing each step (a write of bytes of the site, a sync
 *      of every CPU, the quiescence check, kinst_core_jump_quiet(),
 *      over the saved PCs of every stopped thread and interrupted CPU
 *      and the head's trampoline range, or where its breakpoint handler
 *      sends a hit at the head); a failed check stops the placing with
 *      the breakpoint in place (always safe; KINST_E_BUSY), to be
 *      retried later.  kinst_core_jump_run() syncs once per SYNC per
 *      site; a glue that places many sites at once calls
 *      kinst_core_jump_next() instead, which stops each site at its next
 *      SYNC, and makes one sync for all of them (the one walker either
 *      way: no glue interprets the steps itself).
 */

#ifndef _KINST_CORE_JUMP_H_
#define	_KINST_CORE_JUMP_H_

#include "kinst_core.h"

#define	KINST_JUMP_SIZE		5	/* jmp rel32 */
#define	KINST_JUMP_OP		0xe9
#define	KINST_JUMP_CHUNK	192	/* detour bytes per displaced probe */
#define	KINST_JUMP_REDZONE	128	/* the stub keeps clear below %rsp */

/* kinst_core_jump_run(): a thread may be stopped inside; try later */
#define	KINST_E_BUSY		5
/* kinst_core_jump_next(): every CPU must serialize, then call again */
#define	KINST_JUMP_SYNC		6	/* (apart from every KINST_E_*) */
/* kinst_core_jump_next(): every CPU must serialize; the walk is done */
#define	KINST_JUMP_SYNC_END	7

/* kinst_core_jump_fill() flags */
#define	KINST_JUMP_FPU		0x1	/* save x87/SSE around the handler */

/*
 * What the stub pushed, lowest address first.  The interrupted %rsp is
 * the frame's end plus KINST_JUMP_REDZONE (kinst_core_jump_sp()), %rip the
 * displaced probe's address (the handler's argument says which).
 */
struct kinst_jframe {
	kc_uint64_t	jf_r15, jf_r14, jf_r13, jf_r12, jf_r11, jf_r10, jf_r9;
	kc_uint64_t	jf_r8, jf_rdi, jf_rsi, jf_rbp, jf_rbx, jf_rdx, jf_rcx;
	kc_uint64_t	jf_rax, jf_rflags;
};

/*
 * The handler a chunk calls (System V ABI): the frame, the chunk's 'arg',
 * the fxsave area (KINST_JUMP_FPU) or NULL.  Its return resumes the chunk.
 */
typedef void	kinst_jump_handler_t(const struct kinst_jframe *,
		    kc_uint64_t, void *);

/* One step of the live patching protocol. */
struct kinst_jstep {
	kc_uint8_t	js_op;		/* KINST_JS_* */
	kc_uint8_t	js_off;		/* WRITE: first byte of the site */
	kc_uint8_t	js_len;		/* WRITE: how many */
	kc_uint8_t	js_src;		/* WRITE: KINST_JB_* */
};

/* kinst_jstep js_op */
#define	KINST_JS_END	0	/* the protocol is done */
#define	KINST_JS_WRITE	1	/* write js_len bytes at site + js_off */
#define	KINST_JS_SYNC	2	/* every CPU serializes (a rendezvous) */
#define	KINST_JS_QUIET	3	/* kinst_core_jump_quiet(), else stop */
#define	KINST_JS_VIA	4	/* a breakpoint hit resumes at: js_src */

/* kinst_jstep js_src: where a WRITE's bytes come from, at js_off */
#define	KINST_JB_TRAP	1	/* int3 (KINST_PATCHVAL), one byte */
#define	KINST_JB_JUMP	2	/* kinst_core_jump_bytes() */
#define	KINST_JB_ORIG	3	/* the original instruction bytes */
#define	KINST_JV_TRAMP	0	/* VIA: the head's trampoline (or emulation) */
#define	KINST_JV_DETOUR	1	/* VIA: the detour (the tail may be a rel32) */

/*
 * From a site whose breakpoint is written, to the jump; from the jump back
 * to the breakpoint (the glue then disarms it as any breakpoint).  Each
 * ends with KINST_JS_END.
 */
extern const struct kinst_jstep kinst_jump_place[];
extern const struct kinst_jstep kinst_jump_remove[];

/*
 * What a glue does for kinst_core_jump_run(): write 'len' bytes at
 * 'off' bytes into the site (through its text-writing path); make every
 * CPU serialize (and finish any breakpoint handler it is in); the
 * quiescence check over every stopped thread's and interrupted CPU's
 * saved PCs (kinst_core_jump_quiet() over each, 1 when none is inside),
 * with whatever lock dance it needs; say where its breakpoint handler
 * sends a hit at the head from now on (KINST_JV_*).  Only
 * kinst_core_jump_run() calls jo_sync; a glue that syncs for itself after
 * kinst_core_jump_next() leaves it NULL.
 */
struct kinst_jops {
	void	(*jo_write)(void *, kc_uint32_t, const kc_uint8_t *,
		    kc_uint32_t);
	void	(*jo_sync)(void *);
	int	(*jo_quiet)(void *);
	void	(*jo_via)(void *, int);
};

int	kinst_core_jump_next(const struct kinst_jstep *, kc_uint32_t *,
	    const kc_uint8_t[KINST_JUMP_SIZE],
	    const kc_uint8_t[KINST_JUMP_SIZE], const struct kinst_jops *,
	    void *);
int	kinst_core_jump_run(const struct kinst_jstep *,
	    const kc_uint8_t[KINST_JUMP_SIZE],
	    const kc_uint8_t[KINST_JUMP_SIZE], const struct kinst_jops *,
	    void *);
int	kinst_core_jump_window(const kc_uint8_t *, kc_uint32_t);
int	kinst_core_jump_fill(const struct kinst_md *, kc_uintptr_t,
	    kc_uintptr_t, volatile kc_uint8_t *, kc_uint64_t, int,
	    kc_uint64_t, kc_uint64_t, unsigned);
int	kinst_core_jump_bytes(kc_uintptr_t, kc_uintptr_t,
	    kc_uint8_t[KINST_JUMP_SIZE]);
int	kinst_core_jump_quiet(kc_uintptr_t, kc_uintptr_t, kc_uint32_t,
	    const kc_uint64_t *, kc_uint32_t);
kc_uint64_t kinst_core_jump_sp(const struct kinst_jframe *);

#endif /* !_KINST_CORE_JUMP_H_ */

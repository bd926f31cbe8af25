/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_isa.c: the arm64 part of kinstkit's kinst provider: the breakpoint
 * handler (trapframe to struct kinst_regs and back), writing the brk word,
 * and the trampoline pages, behind the interface ../kinst.h declares for
 * every ISA.  The machine-independent rest is in ../kinst.c.
 *
 * A hit on a probe (brk #0x40d, DTRACE_PATCHVAL, at its patch point) fires
 * the DTrace probe and resumes one of two ways: kinst_core_emulate() runs
 * the instruction over the register file (every PC-relative class, and br,
 * blr and ret, which would leave a trampoline without reaching its brk), or
 * the thread goes to the probe's trampoline [instruction][brk #0x40d] and
 * the trampoline's brk brings it back to the instruction after the patch
 * point.  The trampoline's brk is known by its address: each trampoline
 * slot records where its thread resumes.  So nothing ties the two
 * breakpoints to a CPU or a thread -- a thread may take an interrupt, be
 * preempted, migrate or leave through an exception while in a trampoline --
 * and SPSR's interrupt mask is never touched (stock kinst masks interrupts
 * from the first brk to the second and keeps the probe in per-CPU state;
 * a "msr daifclr" or "mrs daif" run in its trampoline sees or makes the
 * wrong mask).
 *
 * Emulated writes go only to registers FreeBSD's return from an EL1
 * exception restores (x0-x17, x29, lr; the generator refuses the others),
 * and x30 lives in tf_lr, not tf_x[] (stock kinst indexes tf_x[30]).
 *
 * A slot is filled once, when its probe is made (kinst_tramp_prepare()),
 * for one instruction at one address, and is reused only for that pair, so
 * a thread inside a trampoline never finds it changed.
 *
 * Unload.  A thread inside a trampoline needs two things that go at unload:
 * the page, and this module's breakpoint handler to answer the
 * trampoline's brk (without it the brk is an unhandled kernel breakpoint, a
 * panic).  So kinst_tramp_inflight counts the threads sent into a
 * trampoline (kinst_invop() adds one when it redirects to a trampoline and
 * takes one off when a trampoline's brk sends a thread back), and
 * kinst_tramp_quiesce(), called at MOD_UNLOAD after dtrace_unregister()
 * has disarmed and destroyed every probe and after a dtrace_sync() (no CPU
 * is still in kinst_invop() about to send one in), waits a bounded time
 * for the count to reach zero.  Only then does the unload remove the
 * handler and kinst_tramp_fini() free the pages; otherwise it is refused
 * with EBUSY, everything kept, and may be asked again.  The count is
 * conservative, not exact: a thread that leaves a trampoline other than
 * through its brk -- an exception whose handler does not return to the
 * trampoline, such as a fault on a trampolined load recovered through
 * pcb_onfault to the copyin(9)-style caller's error path -- never takes its
 * one off, and from then on every unload of this module is refused until
 * reboot.  That leaks the module, never a page a thread may still run.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/linker.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/pcpu.h>
#include <sys/sx.h>

#include <sys/dtrace.h>

#include <vm/vm.h>
#include <vm/vm_extern.h>

#include <machine/atomic.h>
#include <machine/cpufunc.h>
#include <machine/frame.h>

#include "kinst_core.h"
#include "kinst.h"

#if !defined(__aarch64__)
#error "this is the arm64 part of the kinstkit kinst glue"
#endif

#define	KINST_ISA_NOP	0xd503201f	/* NOP_INSTR: ELR += 4 follows */
#define	KINST_SLOTS	(PAGE_SIZE / KINST_TRAMP_SIZE)
#define	KINST_SLOTHASH	1024
#define	KINST_QUIESCE_TRIES	20	/* of 1/10 s each */

/* A page of trampolines, and where each slot's thread resumes. */
struct kinst_tpage {
	struct kinst_tpage	*tp_next;	/* published with release order */
	uint8_t			*tp_page;
	u_int			tp_used;
	uintptr_t		tp_resume[KINST_SLOTS];
};

/* The slot of one (patch point, instruction) pair, for reuse. */
struct kinst_tslot {
	struct kinst_tslot	*ts_next;
	uintptr_t		ts_patchpoint;
	uint32_t		ts_insn;
	uint8_t			*ts_tramp;
};

static struct kinst_tpage *volatile kinst_tpages;
static struct kinst_tslot *kinst_tslots[KINST_SLOTHASH];
static volatile u_int kinst_tramp_inflight;	/* see the top comment */

/*
 * The trampoline for 'md' at 'patchpoint': the pair's slot if it has one,
 * else a new slot, filled.  Called with kinst_sx held (kinst.c serialises
 * probe preparation), so the lists change under one writer; the breakpoint
 * handler only ever reads kinst_tpages.
 */
static uint8_t *
kinst_tramp_get(const struct kinst_md *md, uintptr_t patchpoint)
{
	struct kinst_tslot *ts, **head;
	struct kinst_tpage *tp;
	uint8_t *tramp;
	u_int i;

	head = &kinst_tslots[(patchpoint / KINST_INSN_SIZE) % KINST_SLOTHASH];
	for (ts = *head; ts != NULL; ts = ts->ts_next) {
		if (ts->ts_patchpoint == patchpoint &&
		    ts->ts_insn == md->km_insn)
			return (ts->ts_tramp);
	}
	tp = kinst_tpages;
	if (tp == NULL || tp->tp_used == KINST_SLOTS) {
		tp = malloc(sizeof(*tp), M_KINST, M_WAITOK | M_ZERO);
		tp->tp_page = (uint8_t *)kmem_malloc(PAGE_SIZE,
		    M_WAITOK | M_EXEC);
		/* Every unused slot a brk nobody answers: a stray jump traps. */
		for (i = 0; i < PAGE_SIZE; i += KINST_INSN_SIZE)
			*(uint32_t *)(tp->tp_page + i) = KINST_PATCHVAL;
		tp->tp_next = kinst_tpages;
		atomic_store_rel_ptr((volatile uintptr_t *)&kinst_tpages,
		    (uintptr_t)tp);
	}
	i = tp->tp_used;
	tramp = tp->tp_page + i * KINST_TRAMP_SIZE;
	if (kinst_core_tramp_fill(md, tramp) != 0)
		return (NULL);
	tp->tp_resume[i] = kinst_core_resume(md, patchpoint);
	cpu_icache_sync_range((vm_offset_t)tramp, KINST_TRAMP_SIZE);
	atomic_thread_fence_rel();
	tp->tp_used = i + 1;
	ts = malloc(sizeof(*ts), M_KINST, M_WAITOK);
	ts->ts_patchpoint = patchpoint;
	ts->ts_insn = md->km_insn;
	ts->ts_tramp = tramp;
	ts->ts_next = *head;
	*head = ts;
	return (tramp);
}

/* Where the thread at a trampoline's brk 'addr' resumes; 0 if it is none. */
static uintptr_t
kinst_tramp_resume(uintptr_t addr)
{
	struct kinst_tpage *tp;
	uintptr_t off;

	tp = (struct kinst_tpage *)atomic_load_acq_ptr(
	    (volatile uintptr_t *)&kinst_tpages);
	for (; tp != NULL; tp = tp->tp_next) {
		off = addr - (uintptr_t)tp->tp_page;
		if (off >= PAGE_SIZE)
			continue;
		if (off % KINST_TRAMP_SIZE != KINST_INSN_SIZE ||
		    off / KINST_TRAMP_SIZE >= tp->tp_used)
			return (0);
		return (tp->tp_resume[off / KINST_TRAMP_SIZE]);
	}
	return (0);
}

/* The little-endian word at 'p', at any alignment (a copy may be any). */
static uint32_t
kinst_isa_get(const volatile uint8_t *p)
{

	return ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24);
}

/* kp's breakpoint word. */
static uint32_t
kinst_isa_bp(const struct kinst_probe *kp)
{
	uint8_t bp[KINST_INSN_SIZE];

	(void)kinst_core_patch(&kp->kp_md, bp);
	return (kinst_isa_get(bp));
}

/*
 * kinst_patch_tracepoint(): write 'val' over kp's word if it still is
 * 'expect', through the kernel's writable alias of the text, then make the
 * instruction cache see it.  false if the word was something else and was
 * left.  Every DTrace provider patches from its enable and disable
 * callbacks, under dtrace_lock, as ours do, so no other provider writes
 * between the compare and the write.
 */
static bool
kinst_isa_patch(struct kinst_probe *kp, uint32_t expect, uint32_t val)
{
	vm_offset_t addr;

	if (*(volatile uint32_t *)kp->kp_patchpoint != expect)
		return (false);
	if (!arm64_get_writable_addr((vm_offset_t)kp->kp_patchpoint, &addr))
		panic("kinst: no writable address for %p", kp->kp_patchpoint);
	*(volatile uint32_t *)addr = val;
	cpu_icache_sync_range((vm_offset_t)kp->kp_patchpoint,
	    KINST_INSN_SIZE);
	return (true);
}

kinst_patchval_t
kinst_isa_peek(const struct kinst_probe *kp __unused,
    const volatile uint8_t *p)
{

	return (kinst_isa_get(p));
}

/* In a copy of kp's word: the original, if it is our brk. */
void
kinst_isa_unpatch(const struct kinst_probe *kp, uint8_t *copy)
{
	uint32_t v;
	int i;

	if (kinst_isa_get(copy) != kinst_isa_bp(kp))
		return;
	v = kp->kp_savedval;
	for (i = 0; i < KINST_INSN_SIZE; i++)
		copy[i] = (uint8_t)(v >> (8 * i));
}

bool
kinst_isa_arm(struct kinst_probe *kp)
{

	return (kinst_isa_patch(kp, kp->kp_savedval, kinst_isa_bp(kp)));
}

bool
kinst_isa_disarm(struct kinst_probe *kp)
{

	return (kinst_isa_patch(kp, kinst_isa_bp(kp), kp->kp_savedval));
}

/*
 * Probe creation (kinst_sx held; may sleep): the trampoline of kp's
 * instruction at kp's address, filled now, unless the instruction is
 * emulated.  0 or ENOMEM.
 */
int
kinst_tramp_prepare(struct kinst_probe *kp)
{

	sx_assert(&kinst_sx, SA_XLOCKED);
	if (kinst_core_is_emulated(&kp->kp_md) || kp->kp_tramp != NULL)
		return (0);
	kp->kp_tramp = kinst_tramp_get(&kp->kp_md,
	    (uintptr_t)kp->kp_patchpoint);
	return (kp->kp_tramp == NULL ? ENOMEM : 0);
}

/* dtps_enable: the trampoline was filled when the probe was made. */
const char *
kinst_tramp_take(struct kinst_probe *kp)
{

	if (kinst_core_is_emulated(&kp->kp_md) || kp->kp_tramp != NULL)
		return (NULL);
	return ("it has no trampoline");
}

/* dtps_destroy: the slot stays with its address. */
void
kinst_tramp_release(struct kinst_probe *kp __unused)
{
}

/*
 * MOD_UNLOAD, after dtrace_unregister() (every probe disarmed and
 * destroyed): true once no thread is inside a trampoline, false if one
 * still is after KINST_QUIESCE_TRIES tenths of a second (see the top
 * comment).  Sleeps.
 */
bool
kinst_tramp_quiesce(void)
{
	int i;

	/* No CPU is still in kinst_invop() about to send a thread in. */
	dtrace_sync();
	for (i = 0; atomic_load_acq_int(&kinst_tramp_inflight) != 0; i++) {
		if (i == KINST_QUIESCE_TRIES)
			return (false);
		pause("kinstq", MAX(hz / 10, 1));
	}
	return (true);
}

/*
 * Unload, after kinst_tramp_quiesce() and dtrace_invop_remove(): the pages
 * and the slots go.  MOD_UNLOAD refuses the unload while the count is not
 * zero, and a failed load armed nothing.
 */
void
kinst_tramp_fini(void)
{
	struct kinst_tpage *tp;
	struct kinst_tslot *ts;
	u_int i;

	sx_assert(&kinst_sx, SA_XLOCKED);
	KASSERT(kinst_tramp_inflight == 0,
	    ("kinst: %u threads in trampolines at unload",
	    kinst_tramp_inflight));
	while ((tp = kinst_tpages) != NULL) {
		kinst_tpages = tp->tp_next;
		kmem_free(tp->tp_page, PAGE_SIZE);
		free(tp, M_KINST);
	}
	for (i = 0; i < KINST_SLOTHASH; i++) {
		while ((ts = kinst_tslots[i]) != NULL) {
			kinst_tslots[i] = ts->ts_next;
			free(ts, M_KINST);
		}
	}
}

/*
 * The dtrace_invop() hook, called by dtrace_invop_start() for a brk #0x40d
 * with interrupts disabled.  dtrace_invop_start() adds 4 to ELR for the
 * NOP_INSTR it is given back, so the ELR set here is 4 short.  No lock, no
 * allocation, no call into code that could itself be probed: the probe
 * comes from kinst.c's address chains, with what was derived when it was
 * made.
 */
int
kinst_invop(uintptr_t addr, struct trapframe *frame,
    uintptr_t scratch __unused)
{
	solaris_cpu_t *cpu;
	struct kinst_probe *kp;
	struct kinst_regs kr;
	uintptr_t resume;
	u_int state;
	int i;

	resume = kinst_tramp_resume(addr);
	if (resume != 0) {
		atomic_subtract_int(&kinst_tramp_inflight, 1);
		frame->tf_elr = resume - KINST_INSN_SIZE;
		return (KINST_ISA_NOP);
	}
	if ((kp = kinst_probe_at(addr)) == NULL)
		return (0);
	state = atomic_load_acq_int(&kp->kp_state);
	/*
	 * Disarmed, our word is back: a trap now can only be one taken just
	 * before, unless another provider has since put its own brk here.
	 */
	if (state == KINST_S_IDLE || (state == KINST_S_DISARMED &&
	    kinst_isa_get(kp->kp_patchpoint) == kinst_isa_bp(kp)))
		return (0);

	/* As stock arm64 kinst: the caller is the probe's address. */
	if (kp->kp_id != 0) {
		cpu = &solaris_cpu[curcpu];
		cpu->cpu_dtrace_caller = addr;
		dtrace_probe(kp->kp_id, 0, 0, 0, 0, 0);
		cpu->cpu_dtrace_caller = 0;
	}

	if (kinst_core_is_emulated(&kp->kp_md)) {
		for (i = 0; i < 30; i++)
			kr.kr_x[i] = frame->tf_x[i];
		kr.kr_x[30] = frame->tf_lr;
		kr.kr_sp = frame->tf_sp;
		kr.kr_pc = addr;
		kr.kr_nzcv = frame->tf_spsr & 0xf0000000UL;
		if (kinst_core_emulate(&kp->kp_md, addr, &kr) == 0) {
			for (i = 0; i < 30; i++)
				frame->tf_x[i] = kr.kr_x[i];
			frame->tf_lr = kr.kr_x[30];
			frame->tf_elr = kr.kr_pc - KINST_INSN_SIZE;
			return (KINST_ISA_NOP);
		}
	} else if (kp->kp_tramp != NULL) {
		atomic_add_int(&kinst_tramp_inflight, 1);
		frame->tf_elr = (uintptr_t)kp->kp_tramp - KINST_INSN_SIZE;
		return (KINST_ISA_NOP);
	}

	/*
	 * Unreachable: an armed probe has its trampoline, and an emulated
	 * kind emulates.  As stock kinst does when it has no trampoline: put
	 * the word back and run it in place.  Nothing may be printed here.
	 */
	(void)kinst_isa_patch(kp, kinst_isa_bp(kp), kp->kp_savedval);
	atomic_store_rel_int(&kp->kp_state, KINST_S_DISARMED);
	frame->tf_elr = addr - KINST_INSN_SIZE;
	return (KINST_ISA_NOP);
}

/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_isa.c: the amd64 part of kinstkit's kinst provider: the breakpoint
 * handler (trapframe to struct kinst_regs and back), writing the breakpoint
 * byte, and the trampolines, behind the interface ../kinst.h declares for
 * every ISA.  The machine-independent rest is in ../kinst.c.
 *
 * Trampolines are static and per patch address, not per thread and per CPU
 * as in stock amd64 kinst, which rewrites a shared trampoline on every hit
 * because the rel32 fix-up depends on where the trampoline is.  There, a
 * thread interrupted or faulting inside its trampoline resumes into whatever
 * the trampoline holds by then, and code running on the same thread in
 * between (a fault handler, a preemption with interrupts enabled) may have
 * hit another probe and refilled it.  Here a trampoline slot is filled once,
 * for one instruction at one address, when a probe there is first enabled,
 * and never written again: any number of CPUs and threads may run, be
 * interrupted in, be preempted in or sleep in it, nested hits use other
 * slots, and the interrupt flag is the interrupted code's own (popf and sti
 * are refused by the generator anyway).  kinst_tramp.c gives out the slots;
 * this file maps their pages and says what a slot holds.
 *
 * Unload keeps the pages, deliberately, and the next load reuses them.
 * #BP returns with the interrupted code's PSL_I, so a thread can be
 * preempted with %rip inside a trampoline, and a trampolined instruction
 * can fault and sleep; dtrace_sync() waits only for CPUs in probe context,
 * not for such threads, and no cheap quiescence point proves that none is
 * left (a trampoline can be left by its jmp back, but also by a taken
 * branch, a ret or an exception, so threads cannot be counted out).
 * Unmapping would make such a thread fault when it resumes, so the pages
 * stay mapped, their contents valid, after kldunload (KINST_TRAMP_KEEP in
 * kinst_isa.h), and kinst_tramp.c hands the pool to the next load of this
 * module: a probe made again at an address gets the very slot it had, and
 * new ones take slots never filled.  A load cycle maps no page the last one
 * mapped.  Nor does unload wait for such threads (kinst_tramp_quiesce()):
 * a trampoline here ends in a jmp back to the instruction after the patch
 * point, not in a breakpoint only this module answers, so a thread still in
 * one after the breakpoint handler is gone finishes it unaided.
 *
 * Trampoline pages are mapped above KERNBASE, in the kernel's top 2 GiB like
 * the kernel text and every module (sys/cddl/dev/kinst/trampoline.c does the
 * same), so that the rewritten rel32 of a RIP-relative instruction reaches
 * its target; kinst_core_tramp_fill() refuses the enable if it does not.
 * They are mapped read and execute only (stock kinst maps them RWX): a page
 * is filled with int3 and its slots are filled through the direct map
 * (PHYS_TO_DMAP() of the page, read-write and never executable), so no
 * mapping of a trampoline is ever both writable and executable.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/linker.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/mutex.h>
#include <sys/pcpu.h>
#include <sys/proc.h>
#include <sys/smp.h>
#include <sys/sx.h>
#include <sys/sysctl.h>
#include <sys/taskqueue.h>

#include <sys/dtrace.h>
/*
 * regs[] reads the trapframe DTrace's own dtrace_invop() records in the
 * thread (t_dtrace_trapframe, sys/cddl/dev/dtrace/dtrace_cddl.h, a
 * source-tree header, not an installed one): a jump hit records its frame
 * there too.  Without the header, jump probes stay off.
 */
#if __has_include(<cddl/dev/dtrace/dtrace_cddl.h>)
#include <cddl/dev/dtrace/dtrace_cddl.h>
#define	KINST_JUMP_REGS
#endif

#include <vm/vm.h>
#include <vm/pmap.h>
#include <vm/vm_extern.h>
#include <vm/vm_kern.h>
#include <vm/vm_map.h>
#include <vm/vm_object.h>
#include <vm/vm_param.h>

#include <machine/atomic.h>
#include <machine/cpufunc.h>
#include <machine/frame.h>
#include <machine/md_var.h>

#include "kinst_core.h"
#include "kinst_core_jump.h"
#include "kinst.h"

#if !defined(__amd64__)
#error "the kinstkit kinst glue is amd64 only"
#endif
#ifndef DTRACE_INVOP_CALL
#error "no call emulation in dtrace_invop_start(): FreeBSD 14.0 or later"
#endif

/*
 * A page above KERNBASE, read and execute only, and its direct-map alias,
 * where kinst_tramp.c writes it.  May sleep; NULL when the kernel map is
 * full.  Never freed (KINST_TRAMP_KEEP): see the comment at the top.
 */
uint8_t *
kinst_isa_tpage_alloc(uint8_t **write)
{
	vm_offset_t addr;

	addr = KERNBASE;
	if (vm_map_find(kernel_map, NULL, 0, &addr, PAGE_SIZE, 0,
	    VMFS_ANY_SPACE, VM_PROT_READ | VM_PROT_EXECUTE, VM_PROT_ALL, 0) !=
	    KERN_SUCCESS)
		return (NULL);
	if (kmem_back(kernel_object, addr, PAGE_SIZE, M_WAITOK | M_EXEC) !=
	    KERN_SUCCESS) {
		(void)vm_map_remove(kernel_map, addr, addr + PAGE_SIZE);
		return (NULL);
	}
	/* kmem_back() maps it read, write and execute: drop the write. */
	pmap_protect(kernel_pmap, addr, addr + PAGE_SIZE,
	    VM_PROT_READ | VM_PROT_EXECUTE);
	*write = (uint8_t *)PHYS_TO_DMAP(pmap_kextract(addr));
	return ((uint8_t *)addr);
}

/* Calls are emulated; everything else runs in a trampoline. */
bool
kinst_isa_tramp_needed(const struct kinst_probe *kp)
{

	return (!kinst_core_is_call(&kp->kp_md));
}

/*
 * The instruction, its rel32 rewritten for where the trampoline runs, then
 * jmp *0(%rip) back to the instruction after the patch point.
 */
const char *
kinst_isa_tramp_fill(const struct kinst_probe *kp, uintptr_t tramp,
    uint8_t *buf, uintptr_t *resume)
{

	if (kinst_core_tramp_fill(&kp->kp_md, (uintptr_t)kp->kp_patchpoint,
	    tramp, buf) != 0)
		return ("its trampoline cannot reach the instruction's "
		    "target (beyond +-2 GiB)");
	*resume = (uintptr_t)kp->kp_patchpoint + kp->kp_md.km_instlen;
	return (NULL);
}

/*
 * Nothing to do: x86 instruction fetch sees stores (here through the
 * direct map), and the CPU that takes a probe's #BP runs iretq, which
 * serializes, before it fetches from the slot the enable filled.
 */
void
kinst_isa_tramp_sync(uint8_t *tramp __unused, size_t len __unused)
{
}

/*
 * kinst_patch_tracepoint(): write 'val' over the byte at 'pc' if it still is
 * 'expect'; one byte, with CR0.WP clear and interrupts off.  false if the
 * byte was something else and was left.  Every DTrace provider patches from
 * its enable and disable callbacks, under dtrace_lock, as ours do, so no
 * other provider writes between the compare and the write.
 */
static bool
kinst_patch(uint8_t *pc, uint8_t expect, uint8_t val)
{
	register_t intr;
	bool old_wp, done;

	intr = intr_disable();
	old_wp = disable_wp();
	done = *(volatile uint8_t *)pc == expect;
	if (done)
		*(volatile uint8_t *)pc = val;
	restore_wp(old_wp);
	intr_restore(intr);
	return (done);
}

/*
 * Jump probes (issue 22; docs/kinst-module.md, "Jump probes"), off unless
 * debug.kinst.jump is 1 (a loader tunable and a sysctl, read when a probe
 * is armed).  A probe the table marks as a jump head (kt_jump, generate
 * --jump) is armed as a breakpoint as always, then queued for the jump
 * task, which runs in a thread (it sleeps, and it walks every thread):
 * it fills the head's detour once (kinst_core_jump_fill(), in pages from
 * kinst_isa_tpage_alloc(), kept as the trampolines' are) and places the
 * jump by the portable core's protocol (kinst_core_jump_run() over
 * kinst_jump_place[]): the quiescence check it asks for is
 * kinst_jop_quiet() below.  A busy check keeps the breakpoint and retries
 * later.  Disarming removes the jump first (kinst_jump_remove[]); arming a
 * probe inside a jump's window, whose byte the jump covers, removes that
 * jump first (kinst_isa_peek()).  Only the head's probe fires in its
 * detour: a head is placed only while no probe of its window is armed.
 *
 * kinst_jump_mtx guards the queue and every kp_j* field but kp_jvia; it
 * is taken after dtrace_lock (disable), kinst_hash_mtx (enable) and
 * kinst_sx (the task), and every write of a jump's bytes is made under it.
 */
#define	KINST_JUMP_RETRY	(hz / 10)	/* ticks between busy tries */
#define	KINST_JUMP_TRIES	50		/* then it stays a breakpoint */

static SYSCTL_NODE(_debug, OID_AUTO, kinst, CTLFLAG_RD | CTLFLAG_MPSAFE, 0,
    "kinstkit's kinst provider");
static int kinst_jump_on;
SYSCTL_INT(_debug_kinst, OID_AUTO, jump, CTLFLAG_RWTUN, &kinst_jump_on, 0,
    "place a jump instead of a breakpoint where the table proves it safe "
    "(generate --jump), from the next enable");

static struct mtx	kinst_jump_mtx;
MTX_SYSINIT(kinst_jump_mtx, &kinst_jump_mtx, "kinst jumps", MTX_DEF);

/* A probe is on one of them exactly while its kp_jstate is QUEUED. */
static struct kinst_probe *kinst_jump_queue;	/* for the next run */
static struct kinst_probe *kinst_jump_later;	/* busy in this run */
static bool		kinst_jump_ever;	/* a jump was written */
static struct timeout_task kinst_jump_tt;
static bool		kinst_jump_tt_ready;

/* Where the detours are: pages like the trampolines', filled in order. */
static uint8_t		*kinst_jump_page, *kinst_jump_wpage;
static size_t		kinst_jump_used;

/* The state of one placing or removal, for the core's protocol steps. */
struct kinst_jctx {
	struct kinst_probe	*jc_kp;
	u_int			jc_gen;		/* kp_jgen when it began */
	u_int			jc_n;		/* probes in the window */
};

static void	kinst_fire(struct kinst_probe *, struct trapframe *);

/* How many probes a jump at kp displaces: 0, a breakpoint only. */
static u_int
kinst_jump_window(const struct kinst_probe *kp)
{

	if (kinst_table.kt_jump == NULL ||
	    kp->kp_index >= kinst_table.kt_nprobes)
		return (0);
	return (kinst_table.kt_jump[kp->kp_index]);
}

/* 'len' bytes at 'pc' of the kernel's text, with CR0.WP clear. */
static void
kinst_poke(uint8_t *pc, const uint8_t *src, size_t len)
{
	register_t intr;
	bool old_wp;
	size_t i;

	intr = intr_disable();
	old_wp = disable_wp();
	for (i = 0; i < len; i++)
		((volatile uint8_t *)pc)[i] = src[i];
	restore_wp(old_wp);
	intr_restore(intr);
}

static void
kinst_jump_nop(void *arg __unused)
{
}

static void
kinst_jop_write(void *arg, kc_uint32_t off, const kc_uint8_t *src,
    kc_uint32_t len)
{
	struct kinst_jctx *jc;

	jc = arg;
	mtx_assert(&kinst_jump_mtx, MA_OWNED);
	kinst_poke(jc->jc_kp->kp_patchpoint + off, src, len);
}

/*
 * Every CPU takes an interrupt and returns from it, which serializes its
 * instruction fetch, and has left any breakpoint handler it was in
 * (they run with interrupts disabled).
 */
static void
kinst_jop_sync(void *arg __unused)
{

	smp_rendezvous(NULL, kinst_jump_nop, NULL, NULL);
}

static void
kinst_jop_via(void *arg, int via)
{
	struct kinst_jctx *jc;

	jc = arg;
	atomic_store_rel_int(&jc->jc_kp->kp_jvia, (u_int)via);
}

/* What one quiescence check found. */
struct kinst_jscan {
	uintptr_t		js_pc;		/* the head */
	uintptr_t		js_tramp;	/* its trampoline, or 0 */
	struct thread		**js_seen;	/* per CPU: its curthread */
	volatile u_int		js_busy;	/* a saved PC was inside */
};

/* Every word of [lo, hi): none inside the window nor the trampoline. */
static bool
kinst_jump_words_quiet(const struct kinst_jscan *js, uintptr_t lo,
    uintptr_t hi)
{

	lo = roundup2(lo, sizeof(uint64_t));
	if (hi <= lo)
		return (true);
	return (kinst_core_jump_quiet(js->js_pc, js->js_tramp,
	    js->js_tramp != 0 ? KINST_TRAMP_SIZE : 0, (const uint64_t *)lo,
	    (uint32_t)((hi - lo) / sizeof(uint64_t))) != 0);
}

/*
 * In the rendezvous, on every CPU: the frames of what this CPU was
 * running lie on its thread's kernel stack, above this function's frame
 * (x86 takes the rendezvous IPI on the current stack, not an IST one).
 */
static void
kinst_jump_selfscan(void *arg)
{
	struct kinst_jscan *js;
	struct thread *td;
	uintptr_t lo, hi;

	js = arg;
	td = curthread;
	js->js_seen[curcpu] = td;
	hi = td->td_kstack + (uintptr_t)td->td_kstack_pages * PAGE_SIZE;
	lo = (uintptr_t)__builtin_frame_address(0);
	if (lo < td->td_kstack || lo >= hi)
		lo = td->td_kstack;
	if (!kinst_jump_words_quiet(js, lo, hi))
		atomic_store_rel_int(&js->js_busy, 1);
}

/*
 * A thread, thread_lock held: true when none of its saved PCs can be
 * inside.  One running now must have been scanned by its CPU in the
 * rendezvous (a thread stopped then might have stopped inside and be
 * running there now); a swapped-out stack cannot be read.
 */
static bool
kinst_jump_td_quiet(const struct kinst_jscan *js, struct thread *td)
{
	u_int i;

	if (TD_IS_RUNNING(td)) {
		for (i = 0; i <= mp_maxid; i++)
			if (js->js_seen[i] == td)
				return (true);
		return (false);
	}
#ifdef TD_IS_SWAPPED
	if (TD_IS_SWAPPED(td))
		return (false);
#endif
	return (kinst_jump_words_quiet(js, td->td_kstack, td->td_kstack +
	    (uintptr_t)td->td_kstack_pages * PAGE_SIZE));
}

/*
 * The quiescence rule's check for the head in 'jc', in the task with
 * kinst_jump_mtx held (dropped meanwhile): every CPU scans its own stack
 * in a rendezvous, then every thread's kernel stack is scanned under its
 * thread lock.  Nothing can enter the window once the int3 is seen
 * everywhere, so a thread inside at the end was inside at every scan.
 * True when nothing was found and the probe was not undone meanwhile.
 */
static int
kinst_jop_quiet(void *arg)
{
	struct kinst_jctx *jc;
	struct kinst_probe *kp;
	struct kinst_jscan js;
	struct proc *p;
	struct thread *td;
	bool quiet;

	jc = arg;
	kp = jc->jc_kp;
	js.js_pc = (uintptr_t)kp->kp_patchpoint;
	js.js_tramp = (uintptr_t)kp->kp_tramp;
	js.js_busy = 0;
	mtx_unlock(&kinst_jump_mtx);
	js.js_seen = malloc((mp_maxid + 1) * sizeof(js.js_seen[0]), M_KINST,
	    M_WAITOK | M_ZERO);
	smp_rendezvous(NULL, kinst_jump_selfscan, NULL, &js);
	quiet = atomic_load_acq_int(&js.js_busy) == 0;
	sx_slock(&allproc_lock);
	FOREACH_PROC_IN_SYSTEM(p) {
		if (!quiet)
			break;
		PROC_LOCK(p);
		FOREACH_THREAD_IN_PROC(p, td) {
			thread_lock(td);
			quiet = kinst_jump_td_quiet(&js, td);
			thread_unlock(td);
			if (!quiet)
				break;
		}
		PROC_UNLOCK(p);
	}
	sx_sunlock(&allproc_lock);
	free(js.js_seen, M_KINST);
	mtx_lock(&kinst_jump_mtx);
	return (quiet && kp->kp_jgen == jc->jc_gen &&
	    kp->kp_jstate == KINST_J_PLACING &&
	    kp->kp_state == KINST_S_ARMED);
}

static const struct kinst_jops kinst_jops = {
	.jo_write = kinst_jop_write,
	.jo_sync = kinst_jop_sync,
	.jo_quiet = kinst_jop_quiet,
	.jo_via = kinst_jop_via,
};

/*
 * A detour's probe handler (kinst_jump_handler_t), in the probed code's
 * context, 'arg' the head's address (0 in the chunks of displaced
 * instructions): the probe is found by address, as the breakpoint handler
 * finds it, since a thread may sit in a detour while its probe is
 * destroyed.  The frame the stub pushed becomes the trapframe the
 * breakpoint handler would have had (%rip the probe's address), recorded
 * for regs[] as dtrace_invop() records it, and kinst_fire() runs as the
 * breakpoint's does, for an armed probe only.
 */
static void
kinst_jump_hit(const struct kinst_jframe *f, uint64_t arg, void *fx __unused)
{
	struct kinst_probe *kp;
	struct trapframe tf;
#ifdef KINST_JUMP_REGS
	struct trapframe *saved;
#endif
	register_t intr;

	if (arg == 0 || (kp = kinst_probe_at((uintptr_t)arg)) == NULL ||
	    atomic_load_acq_int(&kp->kp_state) != KINST_S_ARMED)
		return;
	memset(&tf, 0, sizeof(tf));
	tf.tf_rax = (register_t)f->jf_rax;
	tf.tf_rcx = (register_t)f->jf_rcx;
	tf.tf_rdx = (register_t)f->jf_rdx;
	tf.tf_rbx = (register_t)f->jf_rbx;
	tf.tf_rbp = (register_t)f->jf_rbp;
	tf.tf_rsi = (register_t)f->jf_rsi;
	tf.tf_rdi = (register_t)f->jf_rdi;
	tf.tf_r8 = (register_t)f->jf_r8;
	tf.tf_r9 = (register_t)f->jf_r9;
	tf.tf_r10 = (register_t)f->jf_r10;
	tf.tf_r11 = (register_t)f->jf_r11;
	tf.tf_r12 = (register_t)f->jf_r12;
	tf.tf_r13 = (register_t)f->jf_r13;
	tf.tf_r14 = (register_t)f->jf_r14;
	tf.tf_r15 = (register_t)f->jf_r15;
	tf.tf_rflags = (register_t)f->jf_rflags;
	tf.tf_rsp = (register_t)kinst_core_jump_sp(f);
	tf.tf_rip = (register_t)kp->kp_patchpoint;
	intr = intr_disable();
#ifdef KINST_JUMP_REGS
	saved = curthread->t_dtrace_trapframe;
	curthread->t_dtrace_trapframe = &tf;
#endif
	kinst_fire(kp, &tf);
#ifdef KINST_JUMP_REGS
	curthread->t_dtrace_trapframe = saved;
#endif
	intr_restore(intr);
}

/*
 * kp's detour, filled once (kinst_sx held, may sleep): NULL when its
 * window is not what the table says, a probe of it is armed, it cannot be
 * relocated there, or there is no page.
 */
static uint8_t *
kinst_jump_detour(struct kinst_probe *kp, u_int n)
{
	struct kinst_func kf;
	struct kinst_walk kw;
	struct kinst_insn ki;
	struct kinst_md md[KINST_JUMP_SIZE];
	struct kinst_probe *other;
	uint8_t lens[KINST_JUMP_SIZE], *run, *wr;
	uintptr_t pc[KINST_JUMP_SIZE];
	size_t len;
	uint32_t next;
	u_int j;

	sx_assert(&kinst_sx, SA_XLOCKED);
	if (n > KINST_JUMP_SIZE)
		return (NULL);
	md[0] = kp->kp_md;
	lens[0] = kp->kp_md.km_instlen;
	pc[0] = (uintptr_t)kp->kp_patchpoint;
	kinst_func_get(&kinst_table, kp->kp_fidx, &kf);
	kinst_core_walk(&kinst_table, &kf, &kw);
	next = kp->kp_off + lens[0];
	j = 1;
	while (j < n && kinst_core_next(&kw, &ki) > 0) {
		if (ki.ki_off < next)
			continue;
		pc[j] = pc[j - 1] + lens[j - 1];
		other = kinst_probe_at(pc[j]);
		if (ki.ki_off != next || ki.ki_kind == KINST_R_REFUSED ||
		    ki.ki_probe != kp->kp_index + j ||
		    (other != NULL && other->kp_state == KINST_S_ARMED) ||
		    kinst_core_derive(&ki, (const volatile uint8_t *)pc[j],
		    &md[j]) != 0)
			return (NULL);
		lens[j] = md[j].km_instlen;
		next += lens[j];
		j++;
	}
	if (j != n || kinst_core_jump_window(lens, n) != 0)
		return (NULL);
	len = (size_t)n * KINST_JUMP_CHUNK;
	if (kinst_jump_page == NULL || kinst_jump_used + len > PAGE_SIZE) {
		if ((kinst_jump_page = kinst_isa_tpage_alloc(
		    &kinst_jump_wpage)) == NULL)
			return (NULL);
		memset(kinst_jump_wpage, KINST_PATCHVAL, PAGE_SIZE);
		kinst_jump_used = 0;
	}
	run = kinst_jump_page + kinst_jump_used;
	wr = kinst_jump_wpage + kinst_jump_used;
	for (j = 0; j < n; j++) {
		if (kinst_core_jump_fill(&md[j], pc[j],
		    (uintptr_t)run + j * KINST_JUMP_CHUNK,
		    wr + j * KINST_JUMP_CHUNK, j + 1 < n ?
		    (uint64_t)(uintptr_t)run + (j + 1) * KINST_JUMP_CHUNK :
		    pc[j] + lens[j], j + 1 == n,
		    (uint64_t)(uintptr_t)kinst_jump_hit,
		    j == 0 ? (uint64_t)pc[0] : 0, 0) != 0)
			return (NULL);
	}
	kinst_jump_used += len;
	return (run);
}

/* Run the jump task now, or after 'ticks'. */
static void
kinst_jump_kick(int ticks)
{

	if (kinst_jump_tt_ready)
		taskqueue_enqueue_timeout(taskqueue_thread, &kinst_jump_tt,
		    ticks);
}

/*
 * Place kp's jump (the task; kinst_sx and kinst_jump_mtx held, the latter
 * dropped meanwhile): fill the detour, then the protocol.  A busy
 * quiescence check queues it again.
 */
static void
kinst_jump_place_one(struct kinst_probe *kp)
{
	struct kinst_jctx jc;
	uint8_t jump[KINST_JUMP_SIZE];
	uint8_t *detour;
	int rv;

	jc.jc_kp = kp;
	jc.jc_gen = kp->kp_jgen;
	jc.jc_n = kinst_jump_window(kp);
	if ((detour = kp->kp_detour) == NULL) {
		mtx_unlock(&kinst_jump_mtx);
		detour = kinst_jump_detour(kp, jc.jc_n);
		mtx_lock(&kinst_jump_mtx);
		if (detour == NULL || kp->kp_jgen != jc.jc_gen) {
			if (kp->kp_jgen == jc.jc_gen)
				kp->kp_jstate = KINST_J_NONE;
			return;
		}
		kp->kp_detour = detour;
	}
	if (kinst_core_jump_bytes((uintptr_t)kp->kp_patchpoint,
	    (uintptr_t)detour, jump) != 0) {
		kp->kp_jstate = KINST_J_NONE;
		return;
	}
	/* Under the lock every arming inside the window takes first. */
	kp->kp_jorig[0] = kp->kp_savedval;
	memcpy(kp->kp_jorig + 1, kp->kp_patchpoint + 1, KINST_JUMP_SIZE - 1);
	rv = kinst_core_jump_run(kinst_jump_place, jump, kp->kp_jorig,
	    &kinst_jops, &jc);
	if (rv == 0) {
		kp->kp_jstate = KINST_J_JUMP;
		kinst_jump_ever = true;
		return;
	}
	/* Busy, or undone meanwhile: a breakpoint, through the detour. */
	if (kp->kp_jgen != jc.jc_gen || kp->kp_jstate != KINST_J_PLACING)
		return;
	if (++kp->kp_jtries >= KINST_JUMP_TRIES) {
		kp->kp_jstate = KINST_J_NONE;
		printf("kinst: %s:%u stays a breakpoint: a thread was "
		    "stopped inside its jump's bytes at every try\n",
		    kp->kp_func, kp->kp_off);
		return;
	}
	kp->kp_jstate = KINST_J_QUEUED;
	kp->kp_jnext = kinst_jump_later;
	kinst_jump_later = kp;
}

/* The jump task: every queued head, under kinst_sx. */
static void
kinst_jump_task(void *arg __unused, int pending __unused)
{
	struct kinst_probe *kp;

	sx_xlock(&kinst_sx);
	mtx_lock(&kinst_jump_mtx);
	while ((kp = kinst_jump_queue) != NULL) {
		kinst_jump_queue = kp->kp_jnext;
		kp->kp_jnext = NULL;
		kp->kp_jstate = KINST_J_PLACING;
		kinst_jump_place_one(kp);
	}
	if ((kinst_jump_queue = kinst_jump_later) != NULL) {
		kinst_jump_later = NULL;
		kinst_jump_kick(KINST_JUMP_RETRY);
	}
	mtx_unlock(&kinst_jump_mtx);
	sx_xunlock(&kinst_sx);
}

/* Take queued kp off its queue (kinst_jump_mtx held). */
static void
kinst_jump_dequeue(struct kinst_probe *kp)
{
	struct kinst_probe **pp;

	for (pp = &kinst_jump_queue; *pp != NULL; pp = &(*pp)->kp_jnext) {
		if (*pp == kp) {
			*pp = kp->kp_jnext;
			break;
		}
	}
	for (pp = &kinst_jump_later; *pp != NULL; pp = &(*pp)->kp_jnext) {
		if (*pp == kp) {
			*pp = kp->kp_jnext;
			break;
		}
	}
	kp->kp_jnext = NULL;
}

/*
 * Undo kp's jump, or its placing (kinst_jump_mtx held): the reverse
 * protocol if the jump is written, and the breakpoint path through the
 * trampoline again.  kp stays an armed breakpoint.
 */
static void
kinst_jump_undo(struct kinst_probe *kp)
{
	struct kinst_jctx jc;
	uint8_t jump[KINST_JUMP_SIZE];

	mtx_assert(&kinst_jump_mtx, MA_OWNED);
	if (kp->kp_jstate == KINST_J_NONE)
		return;
	if (kp->kp_jstate == KINST_J_QUEUED)
		kinst_jump_dequeue(kp);
	jc.jc_kp = kp;
	jc.jc_gen = kp->kp_jgen;
	jc.jc_n = kinst_jump_window(kp);
	if (kp->kp_jstate == KINST_J_JUMP &&
	    kinst_core_jump_bytes((uintptr_t)kp->kp_patchpoint,
	    (uintptr_t)kp->kp_detour, jump) == 0)
		(void)kinst_core_jump_run(kinst_jump_remove, jump,
		    kp->kp_jorig, &kinst_jops, &jc);
	atomic_store_rel_int(&kp->kp_jvia, KINST_JV_TRAMP);
	kp->kp_jstate = KINST_J_NONE;
	kp->kp_jgen++;
}

/*
 * Before the byte at 'pc' is read or armed: a jump whose rel32 covers it
 * (its head 1-4 bytes before) is undone, so the byte is the original.
 */
static void
kinst_jump_uncover(uintptr_t pc)
{
	struct kinst_probe *head;
	u_int d;

	mtx_lock(&kinst_jump_mtx);
	for (d = 1; d < KINST_JUMP_SIZE; d++)
		if ((head = kinst_probe_at(pc - d)) != NULL)
			kinst_jump_undo(head);
	mtx_unlock(&kinst_jump_mtx);
}

/* Armed kp: queue it for the jump task if it heads a jump. */
static void
kinst_jump_arm(struct kinst_probe *kp)
{

#ifdef KINST_JUMP_REGS
	if (kinst_jump_on == 0 || kinst_jump_window(kp) == 0)
		return;
	mtx_lock(&kinst_jump_mtx);
	if (kp->kp_jstate == KINST_J_NONE) {
		kp->kp_jstate = KINST_J_QUEUED;
		kp->kp_jtries = 0;
		kp->kp_jnext = kinst_jump_queue;
		kinst_jump_queue = kp;
		kinst_jump_kick(0);
	}
	mtx_unlock(&kinst_jump_mtx);
#else
	(void)kp;
#endif
}

/* Before kp's breakpoint is disarmed: its jump goes first. */
static void
kinst_jump_disarm(struct kinst_probe *kp)
{

	mtx_lock(&kinst_jump_mtx);
	kinst_jump_undo(kp);
	mtx_unlock(&kinst_jump_mtx);
}

static void
kinst_jump_init(void *arg __unused)
{

	TIMEOUT_TASK_INIT(taskqueue_thread, &kinst_jump_tt, 0,
	    kinst_jump_task, NULL);
	kinst_jump_tt_ready = true;
}
SYSINIT(kinst_jump, SI_SUB_DTRACE_PROVIDER, SI_ORDER_ANY, kinst_jump_init,
    NULL);

/*
 * Unload, after every probe is disarmed and destroyed: nothing to wait for
 * (see the comment at the top), but the jump task, if it runs now (it
 * finds nothing to do; a later kldunload succeeds); a pending run is
 * cancelled.  Once a jump has been placed, never: a detour calls this
 * module's kinst_jump_hit(), and a thread preempted in a detour's stub
 * would call it after the module is gone.
 */
bool
kinst_tramp_quiesce(void)
{

	if (kinst_jump_ever) {
		printf("kinst: jump probes were placed (debug.kinst.jump): a "
		    "thread may be inside a detour, which calls this module; "
		    "it stays loaded until reboot\n");
		return (false);
	}
	return (!kinst_jump_tt_ready || taskqueue_cancel_timeout(
	    taskqueue_thread, &kinst_jump_tt, NULL) == 0);
}

/*
 * The byte at 'p': int3 covers one.  At a live patch point, a jump whose
 * rel32 covers it is undone first (kinst_jump_uncover()): enabling a probe
 * inside a jump's window makes the head a breakpoint again.
 */
kinst_patchval_t
kinst_isa_peek(const struct kinst_probe *kp, const volatile uint8_t *p)
{

	if (p == kp->kp_patchpoint)
		kinst_jump_uncover((uintptr_t)p);
	return (*p);
}

/*
 * In a copy of kp's bytes: the original first byte, if it is our int3 (or
 * our jump's opcode), and the original tail of a jump kp placed.
 */
void
kinst_isa_unpatch(const struct kinst_probe *kp, uint8_t *copy)
{

	if (*copy == KINST_PATCHVAL || (kp->kp_detour != NULL &&
	    *copy == KINST_JUMP_OP))
		*copy = kp->kp_savedval;
	if (kp->kp_detour != NULL && kp->kp_jorig[0] == kp->kp_savedval)
		memcpy(copy + 1, kp->kp_jorig + 1, KINST_JUMP_SIZE - 1);
}

bool
kinst_isa_arm(struct kinst_probe *kp)
{

	if (!kinst_patch(kp->kp_patchpoint, kp->kp_savedval, KINST_PATCHVAL))
		return (false);
	kinst_jump_arm(kp);
	return (true);
}

bool
kinst_isa_disarm(struct kinst_probe *kp)
{

	kinst_jump_disarm(kp);
	return (kinst_patch(kp->kp_patchpoint, KINST_PATCHVAL,
	    kp->kp_savedval));
}

/*
 * What a hit does, from the breakpoint handler or a jump's detour: fire
 * kp's DTrace probe, its caller the word at the probed code's %rsp, with
 * interrupts disabled.
 */
static void
kinst_fire(struct kinst_probe *kp, struct trapframe *frame)
{
	solaris_cpu_t *cpu;
	uintptr_t *stack;

	if (kp->kp_id == 0)
		return;
	cpu = &solaris_cpu[curcpu];
	stack = (uintptr_t *)frame->tf_rsp;
	DTRACE_CPUFLAG_SET(CPU_DTRACE_NOFAULT);
	cpu->cpu_dtrace_caller = stack[0];
	DTRACE_CPUFLAG_CLEAR(CPU_DTRACE_NOFAULT | CPU_DTRACE_BADADDR);
	dtrace_probe(kp->kp_id, 0, 0, 0, 0, 0);
	cpu->cpu_dtrace_caller = 0;
}

/*
 * The dtrace_invop() hook, called by dtrace_invop_start() with interrupts
 * disabled for every int3 in the kernel.  'addr' is the breakpoint's address
 * and 'scratch' a 16-byte slot from which bp_call pushes the return address
 * of an emulated call.  No lock, no allocation, no table access, no call
 * into code that could itself be probed: the probe comes from the address
 * chains, with what was derived when it was made.
 */
int
kinst_invop(uintptr_t addr, struct trapframe *frame, uintptr_t scratch)
{
	struct kinst_probe *kp;
	struct kinst_regs kr;
	uint64_t target, retaddr;
	uint8_t *tramp;
	u_int state;

	if ((kp = kinst_probe_at(addr)) == NULL)
		return (0);
	state = atomic_load_acq_int(&kp->kp_state);
	/*
	 * Disarmed, our byte is back: a trap now can only be one taken just
	 * before, unless another provider has since put its own int3 here.
	 */
	if (state == KINST_S_IDLE ||
	    (state == KINST_S_DISARMED && *kp->kp_patchpoint == KINST_PATCHVAL))
		return (0);

	/*
	 * A jump's tail may be written: its detour fires the probe and runs
	 * what the jump displaces (kinst_core_jump.h, the protocol's rules).
	 */
	if (atomic_load_acq_int(&kp->kp_jvia) == KINST_JV_DETOUR) {
		frame->tf_rip = (register_t)kp->kp_detour;
		return (DTRACE_INVOP_NOP);
	}

	/* regs[] reports the breakpoint's address, as in stock kinst. */
	frame->tf_rip--;
	kinst_fire(kp, frame);

	if (kinst_core_is_call(&kp->kp_md)) {
		kr.kr_gpr[0] = frame->tf_rax;
		kr.kr_gpr[1] = frame->tf_rcx;
		kr.kr_gpr[2] = frame->tf_rdx;
		kr.kr_gpr[3] = frame->tf_rbx;
		kr.kr_gpr[4] = frame->tf_rsp;
		kr.kr_gpr[5] = frame->tf_rbp;
		kr.kr_gpr[6] = frame->tf_rsi;
		kr.kr_gpr[7] = frame->tf_rdi;
		kr.kr_gpr[8] = frame->tf_r8;
		kr.kr_gpr[9] = frame->tf_r9;
		kr.kr_gpr[10] = frame->tf_r10;
		kr.kr_gpr[11] = frame->tf_r11;
		kr.kr_gpr[12] = frame->tf_r12;
		kr.kr_gpr[13] = frame->tf_r13;
		kr.kr_gpr[14] = frame->tf_r14;
		kr.kr_gpr[15] = frame->tf_r15;
		kr.kr_rip = addr;
		kr.kr_rflags = frame->tf_rflags;
		if (kinst_core_call(&kp->kp_md, addr, &kr, &target,
		    &retaddr) == 0) {
			*(uintptr_t *)scratch = retaddr;
			frame->tf_rip = (register_t)target;
			return (DTRACE_INVOP_CALL);
		}
	} else if ((tramp = kp->kp_tramp) != NULL) {
		frame->tf_rip = (register_t)tramp;
		return (DTRACE_INVOP_NOP);
	}

	/*
	 * Unreachable: an armed probe has its trampoline, and only calls are
	 * emulated.  As stock kinst does when it has no trampoline: put the
	 * instruction back and run it in place.  Nothing may be printed here.
	 */
	(void)kinst_patch(kp->kp_patchpoint, KINST_PATCHVAL, kp->kp_savedval);
	atomic_store_rel_int(&kp->kp_state, KINST_S_DISARMED);
	frame->tf_rip = (register_t)addr;
	return (DTRACE_INVOP_NOP);
}

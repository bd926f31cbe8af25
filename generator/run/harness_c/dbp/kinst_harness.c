/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_harness.c: user-space glue that runs kinstkit's kinst core on real
 * arm64 or riscv64 code, the double-breakpoint ISAs, under qemu-user.  The
 * ISA's kinst_core.c (sys/modules/kinst/<arch>/) and the generated
 * kinst_table.c that go into kinst.ko are compiled with this file and the
 * ISA's kh_isa.h (generator/run/harness_c/<arch>/) into an rtld audit
 * library (LD_AUDIT) by the cross compiler, by generator/run/harness.py:
 *
 * - la_objopen() sees every object as soon as rtld maps it, before its
 *   relocations and constructors run.  When it is the image the table is
 *   placed in (kh_target, in the generated kinst_harness_target.h), every
 *   table function's live bytes are checked against its digest
 *   (kinst_core_digest_ok), each probe's emulation data derived from the
 *   live instruction (kinst_core_derive), each trampolined probe given a
 *   static trampoline [instruction][breakpoint] (kinst_core_tramp_fill,
 *   filled once), and the breakpoint written over the instruction
 *   (kinst_core_patch: brk #0x40d; ebreak or c.ebreak).
 * - The SIGTRAP handler maps the ucontext onto struct kinst_regs (kh_isa.h)
 *   and tells the two breakpoints apart by address: at a probe's patch
 *   point it counts the hit and either emulates the instruction
 *   (kinst_core_emulate) or sends the thread into the probe's trampoline; at
 *   a trampoline's own breakpoint it sends the thread back to the
 *   instruction after the patch point (kinst_core_resume).  There is no
 *   per-thread state between the two, as in the module glue.  A trap that
 *   is not ours is passed on to the previous disposition.  Like kinst in
 *   probe context, the handler calls nothing but the core and raw system
 *   calls: never libc, never anything that could itself be probed.
 * - Hits are counted in a shared file mapping, "$KINST_HARNESS_OUT.<pid>.hits";
 *   placements, refusals and load biases go to "$KINST_HARNESS_OUT.<pid>"
 *   when the image is patched, and again at exit and when it is closed.
 *
 * KINST_HARNESS_MODE=locate only records where the image was mapped: no
 * patching, no handler.  The runner uses it for the independent count,
 * QEMU's own trace of the instructions it executes.
 */

#define	_GNU_SOURCE
#include <sys/types.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include "kinst_core.h"
#include "kh_isa.h"

#define	KH_EXPORT	__attribute__((visibility("default")))
#define	KH_MAX_INST	8		/* live copies of the image (dlmopen) */

/* Per-probe, per-copy state. */
#define	KH_S_NONE	0	/* not (yet) placed */
#define	KH_S_READY	1	/* checked, trampoline filled */
#define	KH_S_PLACED	2	/* breakpoint written: traps here are ours */
#define	KH_S_REFUSED	3	/* see the refusal lines */

/* The image's loadable segments at link time (from its program headers). */
struct kh_segment {
	uintptr_t	ks_vaddr;
	size_t		ks_memsz;
	int		ks_prot;
};

/*
 * The image: its path, its loadable segments at link time (kh_segments,
 * KH_NSEGMENTS), their range (kh_image_lo, kh_image_hi) and, when it has
 * one, where its GNU build-id lies and what it is (KH_HAVE_BUILD_ID).
 */
#include "kinst_harness_target.h"

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
	struct kinst_md	*ki_md;		/* per probe, derived from the live bytes */
	uintptr_t	*ki_addr;	/* per probe, its live patch point */
	struct kh_site	*ki_sites;	/* placed probes, by address */
	uint32_t	ki_nsites;
	uint32_t	ki_placed;
	int		ki_closed;
};

static struct kh_inst kh_insts[KH_MAX_INST];
static volatile int kh_ninst;		/* published with release order */
static uint64_t *kh_hits;		/* per entry, all copies; shared */
static int kh_locate;			/* KINST_HARNESS_MODE=locate */
static int kh_audited;			/* loaded by LD_AUDIT */
static int kh_handler_set;
static struct sigaction kh_oldact;
static dev_t kh_target_dev;
static ino_t kh_target_ino;
static int kh_target_known = -1;	/* -1: not looked up yet */
static char *kh_refusals;		/* "refused ..." lines */
static size_t kh_refusals_len, kh_refusals_cap;
static char kh_out_path[4000];		/* $KINST_HARNESS_OUT */
static char *kh_notes;			/* "note ..." lines */
static size_t kh_notes_len, kh_notes_cap;

/* The si_code of a SIGTRAP from a real breakpoint (brk, ebreak, c.ebreak). */
#define	KH_TRAP_CODE	TRAP_BRKPT

/* Refusals, notes, passing a foreign trap on, the site search, the target. */
#include "kh_probe.h"

/*
 * Whose breakpoint is at live address 'pc': *idx is the table index, and
 * the return value 1 for a probe's patch point, 2 for its trampoline's own
 * breakpoint, 0 for neither.  Newest copy first: a closed one may share its
 * addresses.
 */
static int
kh_whose(uintptr_t pc, struct kh_inst **kip, long *idx)
{
	struct kh_inst *ki;
	uintptr_t slot;
	int i, n;

	n = __atomic_load_n(&kh_ninst, __ATOMIC_ACQUIRE);
	for (i = n - 1; i >= 0; i--) {
		ki = &kh_insts[i];
		*kip = ki;
		if (pc - ki->ki_lo < ki->ki_hi - ki->ki_lo) {
			*idx = kh_site_find(ki, pc);
			if (*idx >= 0 && ki->ki_state[*idx] == KH_S_PLACED)
				return (1);
			continue;
		}
		if (ki->ki_tramp == NULL || pc < (uintptr_t)ki->ki_tramp)
			continue;
		slot = pc - (uintptr_t)ki->ki_tramp;
		if (slot % KINST_TRAMP_SIZE != KINST_INSN_SIZE ||
		    slot / KINST_TRAMP_SIZE >= kinst_table.kt_nprobes)
			continue;
		*idx = (long)(slot / KINST_TRAMP_SIZE);
		if (ki->ki_state[*idx] == KH_S_PLACED &&
		    !kinst_core_is_emulated(&ki->ki_md[*idx]))
			return (2);
	}
	return (0);
}

/*
 * The SIGTRAP handler: probe context.  Only the core, direct memory accesses
 * and raw system calls from here on.
 */
static void
kh_trap(int sig, siginfo_t *si, void *arg)
{
	ucontext_t *uc;
	const struct kinst_md *md;
	struct kh_inst *ki;
	struct kinst_regs kr;
	uintptr_t pc;
	long idx;
	int whose;

	uc = arg;
	pc = kh_uc_pc(uc);
	ki = NULL;
	idx = -1;
	whose = si->si_code == TRAP_BRKPT ? kh_whose(pc, &ki, &idx) : 0;
	if (whose == 0) {
		kh_pass_on(sig, si, arg);
		return;
	}
	md = &ki->ki_md[idx];
	if (whose == 2) {
		/* The trampoline ran the instruction: on after the patch point. */
		kh_uc_set_pc(uc, kinst_core_resume(md, ki->ki_addr[idx]));
		return;
	}
	__atomic_fetch_add(&kh_hits[idx], 1, __ATOMIC_RELAXED);
	if (!kinst_core_is_emulated(md)) {
		kh_uc_set_pc(uc, (uintptr_t)(ki->ki_tramp +
		    (uintptr_t)idx * KINST_TRAMP_SIZE));
		return;
	}
	kh_regs_in(uc, &kr);
	if (kinst_core_emulate(md, pc, &kr) != 0) {
		/* Cannot happen for a table entry; do not run on blindly. */
		kh_pass_on(sig, si, arg);
		return;
	}
	kh_regs_out(&kr, uc);
}

/*
 * Trampoline memory: anywhere.  Unlike amd64's, these trampolines hold no
 * PC-relative instruction (those are emulated) and end in a breakpoint,
 * not a jump, so nothing has to be within reach of the image.
 */
static uint8_t *
kh_tramp_alloc(size_t len)
{
	size_t pg;
	void *m;

	pg = (size_t)sysconf(_SC_PAGESIZE);
	len = (len + pg - 1) & ~(pg - 1);
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
	    -1, 0);
	return (m == MAP_FAILED ? NULL : m);
}

#ifdef KH_HAVE_BUILD_ID
#endif

/*
 * This ISA's part of preparing probe 'idx' at live address 'live', its
 * kinst_md already derived: its address for the handler, and its
 * [instruction][breakpoint] trampoline filled unless it is emulated.  NULL
 * when it is ready, else why it is refused.
 */
static const char *
kh_prepare_probe(struct kh_inst *ki, uint32_t idx, uintptr_t live, char *why,
    size_t len)
{
	int err;

	ki->ki_addr[idx] = live;
	if (kinst_core_is_emulated(&ki->ki_md[idx]))
		return (NULL);
	if (ki->ki_tramp == NULL)
		return ("no trampoline memory");
	err = kinst_core_tramp_fill(&ki->ki_md[idx],
	    ki->ki_tramp + (uintptr_t)idx * KINST_TRAMP_SIZE);
	if (err == 0)
		return (NULL);
	snprintf(why, len, "trampoline fill: error %d", err);
	return (why);
}

/* Write the probe's breakpoint: kinst_core_patch() says what and how long. */
static void
kh_write_patch(struct kh_inst *ki, uint32_t idx, uintptr_t addr)
{
	kc_uint8_t bp[4];
	int i, n;

	n = kinst_core_patch(&ki->ki_md[idx], bp);
	for (i = 0; i < n; i++)
		((volatile uint8_t *)addr)[i] = bp[i];
}

/* Every probe of one freshly mapped copy: check, fill, then patch. */
static void
kh_place(struct kh_inst *ki)
{
	const struct kinst_table *kt;
	struct kinst_func kf;
	struct kinst_walk kw;
	struct kinst_insn kin;
	char why[256];
	uintptr_t start, end, pg, site;
	size_t tlen;
	uint32_t f, i;
	int s;

	kt = &kinst_table;
	tlen = (size_t)kt->kt_nprobes * KINST_TRAMP_SIZE;
	ki->ki_tramp = kh_tramp_alloc(tlen);
	ki->ki_md = calloc(kt->kt_nprobes, sizeof(*ki->ki_md));
	ki->ki_addr = calloc(kt->kt_nprobes, sizeof(*ki->ki_addr));
	ki->ki_sites = calloc(kt->kt_nprobes, sizeof(*ki->ki_sites));
	if (ki->ki_md == NULL || ki->ki_addr == NULL || ki->ki_sites == NULL) {
		for (i = 0; i < kt->kt_nprobes; i++)
			kh_refuse(ki, i, "out of memory");
		return;
	}
	for (f = 0; f < kt->kt_nfuncs; f++)
		kh_prepare_func(ki, f);
	pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	if (ki->ki_tramp != NULL && mprotect(ki->ki_tramp,
	    (tlen + pg - 1) & ~(pg - 1), PROT_READ | PROT_EXEC) != 0) {
		for (i = 0; i < kt->kt_nprobes; i++) {
			if (ki->ki_state[i] == KH_S_READY &&
			    !kinst_core_is_emulated(&ki->ki_md[i]))
				kh_refuse(ki, i, "mprotect of the trampolines failed");
		}
	}
	kh_install_handler();
	if (!kh_handler_set) {
		for (i = 0; i < kt->kt_nprobes; i++) {
			if (ki->ki_state[i] == KH_S_READY)
				kh_refuse(ki, i, "sigaction(SIGTRAP) failed");
		}
		return;
	}

	/* The handler's index: every probe ready to be placed, by live address. */
	for (f = 0; f < kt->kt_nfuncs; f++) {
		kinst_func_get(kt, f, &kf);
		kinst_core_walk(kt, &kf, &kw);
		while (kinst_core_next(&kw, &kin) > 0) {
			if (kin.ki_kind == KINST_R_REFUSED ||
			    ki->ki_state[kin.ki_probe] != KH_S_READY)
				continue;
			ki->ki_sites[ki->ki_nsites].ks_addr = kh_func_addr(f) +
			    ki->ki_bias + kin.ki_off;
			ki->ki_sites[ki->ki_nsites++].ks_probe = kin.ki_probe;
		}
	}
	qsort(ki->ki_sites, ki->ki_nsites, sizeof(*ki->ki_sites), kh_site_cmp);

	/* Patch one executable segment at a time, writable only meanwhile. */
	for (s = 0; s < KH_NSEGMENTS; s++) {
		if ((kh_segments[s].ks_prot & PROT_EXEC) == 0)
			continue;
		start = (kh_segments[s].ks_vaddr + ki->ki_bias) & ~(pg - 1);
		end = (kh_segments[s].ks_vaddr + kh_segments[s].ks_memsz +
		    ki->ki_bias + pg - 1) & ~(pg - 1);
		if (mprotect((void *)start, end - start, kh_segments[s].ks_prot |
		    PROT_WRITE) != 0) {
			snprintf(why, sizeof(why), "mprotect of the text: %s",
			    strerror(errno));
			for (i = 0; i < ki->ki_nsites; i++) {
				site = ki->ki_sites[i].ks_addr - ki->ki_bias;
				if (kh_segment_of(site) == &kh_segments[s])
					kh_refuse(ki, ki->ki_sites[i].ks_probe, why);
			}
			continue;
		}
		for (i = 0; i < ki->ki_nsites; i++) {
			site = ki->ki_sites[i].ks_addr - ki->ki_bias;
			if (ki->ki_state[ki->ki_sites[i].ks_probe] != KH_S_READY ||
			    kh_segment_of(site) != &kh_segments[s])
				continue;
			/* Ours before the breakpoint can fire. */
			__atomic_store_n(&ki->ki_state[ki->ki_sites[i].ks_probe],
			    KH_S_PLACED, __ATOMIC_RELEASE);
			kh_write_patch(ki, ki->ki_sites[i].ks_probe,
			    ki->ki_sites[i].ks_addr);
			ki->ki_placed++;
		}
		mprotect((void *)start, end - start, kh_segments[s].ks_prot);
	}
	__builtin___clear_cache((char *)(kh_image_lo + ki->ki_bias),
	    (char *)(kh_image_hi + ki->ki_bias));
	if (ki->ki_tramp != NULL)
		__builtin___clear_cache((char *)ki->ki_tramp,
		    (char *)ki->ki_tramp + tlen);
}

/* The build-id check, the report files and the rtld audit entry points. */
#include "kh_audit.h"

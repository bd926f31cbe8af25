/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_harness.c: user-space glue that runs kinstkit's kinst core on real
 * amd64 code.  The same kinst_core.c (sys/modules/kinst/amd64/) and the same
 * generated kinst_table.c that go into kinst.ko are compiled with this file
 * into an rtld audit library (LD_AUDIT), by generator/run/harness.py:
 *
 * - la_objopen() sees every object as soon as rtld maps it, before its
 *   relocations and constructors run: the program, the libraries it needs at
 *   startup and the ones dlopen() loads later.  When the object is the image
 *   the table is placed in (kh_target, in the generated
 *   kinst_harness_target.h, with each table function's link address there),
 *   every table function's live bytes are checked against its digest
 *   (kinst_core_digest_ok), each probe's metadata is derived from the live
 *   instruction (kinst_core_derive), given a static trampoline within
 *   +-2 GiB of the image (kinst_core_tramp_fill, filled once) and patched
 *   with int3.  The table may have been made from another build of the same
 *   code (harness --table-from): functions are placed by name and size, the
 *   way the module glue finds a table's functions in a linker file.
 * - The SIGTRAP handler maps the ucontext onto struct kinst_regs, looks the
 *   probe up by its live address (%rip - 1), counts the hit and resumes
 *   through the trampoline, or emulates a call (kinst_core_call) by pushing
 *   the return address itself.  A trap that is
 *   not ours is passed on to the previous disposition.  Like kinst in probe
 *   context, the handler calls nothing but the core and raw system calls:
 *   never libc, never anything that could itself be probed.
 * - Hits are counted in a shared file mapping, "$KINST_HARNESS_OUT.<pid>.hits";
 *   placements, refusals and load biases go to "$KINST_HARNESS_OUT.<pid>"
 *   when the image is patched, and again at exit and when it is closed.
 *
 * KINST_HARNESS_MODE=locate only records where the image was mapped: no
 * patching, no handler.  The runner uses it under valgrind, whose callgrind
 * counts are the independent oracle for the hit counts, loading the library
 * with LD_PRELOAD there (see kh_fini()).
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

#define	KH_EXPORT	__attribute__((visibility("default")))
#define	KH_MAX_INST	8		/* live copies of the image (dlmopen) */
#define	KH_WINDOW	0x7fff0000UL	/* rel32 reach, less a margin */
#define	KH_STEP		(16UL << 20)	/* trampoline placement stride */

/* Per-probe, per-copy state. */
#define	KH_S_NONE	0	/* not (yet) placed */
#define	KH_S_READY	1	/* checked, trampoline filled */
#define	KH_S_PLACED	2	/* int3 written: traps here are ours */
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

/*
 * Raw system calls.  The handler uses these instead of libc so that it never
 * calls into code that could be probed (the image may be libc itself).
 */
static long
kh_syscall4(long nr, long a1, long a2, long a3, long a4)
{
	long ret;
	register long r10 __asm__("r10") = a4;

	__asm__ volatile("syscall"
	    : "=a" (ret)
	    : "0" (nr), "D" (a1), "S" (a2), "d" (a3), "r" (r10)
	    : "rcx", "r11", "memory");
	return (ret);
}

/* The si_code of a SIGTRAP from a real breakpoint instruction (int3). */
#define	KH_TRAP_CODE	SI_KERNEL

/* Refusals, notes, passing a foreign trap on, the site search, the target. */
#include "kh_probe.h"

/* Variable readings at sites, when the build generated them (kh_vars.h). */
#if __has_include("kinst_harness_vars.h")
#include "kh_vars.h"
#endif

/*
 * The SIGTRAP handler: probe context.  Only the core, direct memory accesses
 * and raw system calls from here on.
 */
static void
kh_trap(int sig, siginfo_t *si, void *arg)
{
	ucontext_t *uc;
	greg_t *gr;
	const struct kinst_md *md;
	struct kh_inst *ki;
	struct kinst_regs kr;
	uint64_t pc, target, retaddr, sp;
	long idx;
	int i, n;

	uc = arg;
	gr = uc->uc_mcontext.gregs;
	pc = (uint64_t)gr[REG_RIP] - 1;
	idx = -1;
	ki = NULL;
	n = __atomic_load_n(&kh_ninst, __ATOMIC_ACQUIRE);
	if (si->si_code == SI_KERNEL) {
		/* Newest copy first: a closed one may share its addresses. */
		for (i = n - 1; i >= 0; i--) {
			ki = &kh_insts[i];
			if (pc - ki->ki_lo >= ki->ki_hi - ki->ki_lo)
				continue;
			idx = kh_site_find(ki, pc);
			if (idx >= 0 && ki->ki_state[idx] == KH_S_PLACED)
				break;
			idx = -1;
		}
	}
	if (idx < 0) {
		kh_pass_on(sig, si, arg);
		return;
	}
	__atomic_fetch_add(&kh_hits[idx], 1, __ATOMIC_RELAXED);
#ifdef KH_VARS
	kh_vars_hit(pc - ki->ki_bias, uc);
#endif
	md = &ki->ki_md[idx];
	if (!kinst_core_is_call(md)) {
		gr[REG_RIP] = (greg_t)(uintptr_t)(ki->ki_tramp +
		    (uintptr_t)idx * KINST_TRAMP_SIZE);
		return;
	}
	kr.kr_gpr[0] = (uint64_t)gr[REG_RAX];
	kr.kr_gpr[1] = (uint64_t)gr[REG_RCX];
	kr.kr_gpr[2] = (uint64_t)gr[REG_RDX];
	kr.kr_gpr[3] = (uint64_t)gr[REG_RBX];
	kr.kr_gpr[4] = (uint64_t)gr[REG_RSP];
	kr.kr_gpr[5] = (uint64_t)gr[REG_RBP];
	kr.kr_gpr[6] = (uint64_t)gr[REG_RSI];
	kr.kr_gpr[7] = (uint64_t)gr[REG_RDI];
	kr.kr_gpr[8] = (uint64_t)gr[REG_R8];
	kr.kr_gpr[9] = (uint64_t)gr[REG_R9];
	kr.kr_gpr[10] = (uint64_t)gr[REG_R10];
	kr.kr_gpr[11] = (uint64_t)gr[REG_R11];
	kr.kr_gpr[12] = (uint64_t)gr[REG_R12];
	kr.kr_gpr[13] = (uint64_t)gr[REG_R13];
	kr.kr_gpr[14] = (uint64_t)gr[REG_R14];
	kr.kr_gpr[15] = (uint64_t)gr[REG_R15];
	kr.kr_rip = pc;
	kr.kr_rflags = (uint64_t)gr[REG_EFL];
	if (kinst_core_call(md, (kc_uintptr_t)pc, &kr, &target, &retaddr) != 0) {
		/* Cannot happen for a table entry; do not run on blindly. */
		kh_pass_on(sig, si, arg);
		return;
	}
	/* The push the call would have made, then the jump. */
	sp = kr.kr_gpr[4] - 8;
	*(volatile uint64_t *)(uintptr_t)sp = retaddr;
	gr[REG_RSP] = (greg_t)sp;
	gr[REG_RIP] = (greg_t)target;
}

/*
 * Anonymous memory within rel32 reach of the whole image: below its lowest
 * segment or above its highest, moving away in KH_STEP strides.  The hint is
 * only a hint, so every answer is checked.
 */
static uint8_t *
kh_tramp_alloc(uintptr_t lo, uintptr_t hi, size_t len)
{
	uintptr_t hint, p;
	size_t pg;
	void *m;
	int side, step;

	pg = (size_t)sysconf(_SC_PAGESIZE);
	len = (len + pg - 1) & ~(pg - 1);
	lo &= ~(pg - 1);
	hi = (hi + pg - 1) & ~(pg - 1);
	for (step = 0; step < 64; step++) {
		for (side = 0; side < 2; side++) {
			if (side == 0) {
				if (lo < len + step * KH_STEP + pg)
					continue;
				hint = lo - len - step * KH_STEP;
			} else
				hint = hi + step * KH_STEP;
			m = mmap((void *)hint, len, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (m == MAP_FAILED)
				continue;
			p = (uintptr_t)m;
			/* Every byte of the image within reach of every slot. */
			if ((p + len > hi ? p + len : hi) -
			    (p < lo ? p : lo) <= KH_WINDOW)
				return (m);
			munmap(m, len);
		}
	}
	return (NULL);
}

/*
 * This ISA's part of preparing probe 'idx' at live address 'live', its
 * kinst_md already derived: nothing for an emulated call, else its
 * trampoline filled.  NULL when it is ready, else why it is refused.
 */
static const char *
kh_prepare_probe(struct kh_inst *ki, uint32_t idx, uintptr_t live, char *why,
    size_t len)
{
	int err;

	if (kinst_core_is_call(&ki->ki_md[idx]))
		return (NULL);	/* emulated */
	if (ki->ki_tramp == NULL)
		return ("no trampoline memory within +-2 GiB");
	err = kinst_core_tramp_fill(&ki->ki_md[idx], live,
	    ki->ki_tramp + (uintptr_t)idx * KINST_TRAMP_SIZE);
	if (err == 0)
		return (NULL);
	snprintf(why, len, "trampoline fill: error %d%s", err,
	    err == KINST_E_RANGE ?
	    " (rel32 target beyond +-2 GiB of the trampoline)" : "");
	return (why);
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
	ki->ki_tramp = kh_tramp_alloc(kh_image_lo + ki->ki_bias,
	    kh_image_hi + ki->ki_bias, tlen);
	ki->ki_md = calloc(kt->kt_nprobes, sizeof(*ki->ki_md));
	ki->ki_sites = calloc(kt->kt_nprobes, sizeof(*ki->ki_sites));
	if (ki->ki_md == NULL || ki->ki_sites == NULL) {
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
			    !kinst_core_is_call(&ki->ki_md[i]))
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
			/* Ours before the int3 can fire. */
			__atomic_store_n(&ki->ki_state[ki->ki_sites[i].ks_probe],
			    KH_S_PLACED, __ATOMIC_RELEASE);
			*(volatile uint8_t *)ki->ki_sites[i].ks_addr = KINST_PATCHVAL;
			ki->ki_placed++;
		}
		mprotect((void *)start, end - start, kh_segments[s].ks_prot);
	}
	__builtin___clear_cache((char *)(kh_image_lo + ki->ki_bias),
	    (char *)(kh_image_hi + ki->ki_bias));
}

/* The build-id check, the report files and the rtld audit entry points. */
#include "kh_audit.h"

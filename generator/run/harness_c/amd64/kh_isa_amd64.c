/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_isa_amd64.c: the amd64 part of the harness glue (../kh_isa.h): raw
 * system calls, the SIGTRAP handler, and trampolines within rel32 reach of
 * the image.  A probe is int3 over the first byte of its instruction; a hit
 * resumes through the probe's static trampoline [instruction][jmp back]
 * (kinst_core_tramp_fill, filled once), or, for a call, by pushing the
 * return address and jumping to the target (kinst_core_call), as kinst
 * does.
 */

#define	_GNU_SOURCE
#include <sys/types.h>
#include <sys/mman.h>

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <ucontext.h>
#include <unistd.h>

#include "kinst_core.h"
#include "kh_isa.h"

#define	KH_WINDOW	0x7fff0000UL	/* rel32 reach, less a margin */
#define	KH_STEP		(16UL << 20)	/* trampoline placement stride */

/* The si_code of a SIGTRAP from a real breakpoint instruction (int3). */
const int kh_isa_trap_code = SI_KERNEL;

/*
 * Raw system calls.  The handler uses these instead of libc so that it never
 * calls into code that could be probed (the image may be libc itself).
 */
long
kh_isa_syscall4(long nr, long a1, long a2, long a3, long a4)
{
	long ret;
	register long r10 __asm__("r10") = a4;

	__asm__ volatile("syscall"
	    : "=a" (ret)
	    : "0" (nr), "D" (a1), "S" (a2), "d" (a3), "r" (r10)
	    : "rcx", "r11", "memory");
	return (ret);
}

/*
 * The SIGTRAP handler: probe context.  Only the core, direct memory accesses
 * and raw system calls from here on.
 */
void
kh_isa_trap(int sig, siginfo_t *si, void *arg)
{
	ucontext_t *uc;
	greg_t *gr;
	const struct kinst_md *md;
	struct kh_inst *ki;
	struct kinst_regs kr;
	uint64_t pc, target, retaddr, sp;
	long idx;

	uc = arg;
	gr = uc->uc_mcontext.gregs;
	pc = (uint64_t)gr[REG_RIP] - 1;
	ki = NULL;
	idx = si->si_code == SI_KERNEL ? kh_probe_at(pc, &ki) : -1;
	if (idx < 0) {
		kh_pass_on(sig, si, arg);
		return;
	}
	__atomic_fetch_add(&kh_hits[idx], 1, __ATOMIC_RELAXED);
	kh_hit((uintptr_t)pc - ki->ki_bias, uc);
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
	if (kinst_core_call(md, (kc_uintptr_t)pc, &kr, &target,
	    &retaddr) != 0) {
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
uint8_t *
kh_isa_tramp_alloc(uintptr_t lo, uintptr_t hi, size_t len)
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
			/* All of the image within reach of every slot. */
			if ((p + len > hi ? p + len : hi) -
			    (p < lo ? p : lo) <= KH_WINDOW)
				return (m);
			munmap(m, len);
		}
	}
	return (NULL);
}

/* Calls are emulated; everything else runs in its trampoline. */
int
kh_isa_tramped(const struct kinst_md *md)
{

	return (!kinst_core_is_call(md));
}

const char *
kh_isa_prepare(const struct kinst_md *md, uintptr_t live, uint8_t *tramp,
    char *why, size_t len)
{
	int err;

	if (kinst_core_is_call(md))
		return (NULL);	/* emulated */
	if (tramp == NULL)
		return ("no trampoline memory within +-2 GiB");
	err = kinst_core_tramp_fill(md, live, (uintptr_t)tramp, tramp);
	if (err == 0)
		return (NULL);
	snprintf(why, len, "trampoline fill: error %d%s", err,
	    err == KINST_E_RANGE ?
	    " (rel32 target beyond +-2 GiB of the trampoline)" : "");
	return (why);
}

void
kh_isa_patch(const struct kinst_md *md, uintptr_t live)
{

	(void)md;
	*(volatile uint8_t *)live = KINST_PATCHVAL;
}

/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kh_dbp.c: the part of the harness glue (../kh_isa.h) that arm64 and
 * riscv share, the "double breakpoint" ISAs whose programs run under
 * qemu-user: the SIGTRAP handler, trampolines, and writing the probe's
 * breakpoint (kinst_core_patch: brk #0x40d; c.ebreak), and raw system
 * calls (in the convention <arch>/kh_syscall.h names).  What differs
 * between the two, the signal frame's registers, is
 * <arch>/kh_isa_<arch>.c (kh_dbp.h).
 *
 * The handler tells the two breakpoints apart by address: at a probe's
 * patch point it counts the hit and either emulates the instruction
 * (kinst_core_emulate) or sends the thread into the probe's trampoline
 * [instruction][breakpoint] (kinst_core_tramp_fill, filled once); at a
 * trampoline's own breakpoint it sends the thread back to the instruction
 * after the patch point (kinst_core_resume).  There is no per-thread state
 * between the two, as in the module glue (sys/modules/kinst/dbp/).
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
#include "kh_dbp.h"
#include "kh_syscall.h"

/* A raw system call, in the ISA's convention (<arch>/kh_syscall.h). */
long
kh_isa_syscall4(long nr, long a1, long a2, long a3, long a4)
{
	register long r_nr __asm__(KH_SYSCALL_NR) = nr;
	register long r0 __asm__(KH_SYSCALL_A0) = a1;
	register long r1 __asm__(KH_SYSCALL_A1) = a2;
	register long r2 __asm__(KH_SYSCALL_A2) = a3;
	register long r3 __asm__(KH_SYSCALL_A3) = a4;

	__asm__ volatile(KH_SYSCALL_TRAP
	    : "+r" (r0)
	    : "r" (r_nr), "r" (r1), "r" (r2), "r" (r3)
	    : "memory");
	return (r0);
}

/* The si_code of a SIGTRAP from a real breakpoint (brk, ebreak, c.ebreak). */
const int kh_isa_trap_code = TRAP_BRKPT;

/*
 * The probe whose trampoline's own breakpoint is at live address 'pc', and
 * its copy in *kip; -1 if none.  Newest copy first, as kh_probe_at().
 */
static long
kh_dbp_tramp_at(uintptr_t pc, struct kh_inst **kip)
{
	struct kh_inst *ki;
	uintptr_t slot;
	long idx;
	int i;

	for (i = __atomic_load_n(&kh_ninst, __ATOMIC_ACQUIRE) - 1; i >= 0;
	    i--) {
		ki = &kh_insts[i];
		if (ki->ki_tramp == NULL || pc < (uintptr_t)ki->ki_tramp)
			continue;
		slot = pc - (uintptr_t)ki->ki_tramp;
		if (slot % KINST_TRAMP_SIZE != KINST_INSN_SIZE ||
		    slot / KINST_TRAMP_SIZE >= kinst_table.kt_nprobes)
			continue;
		idx = (long)(slot / KINST_TRAMP_SIZE);
		if (ki->ki_state[idx] == KH_S_PLACED &&
		    !kinst_core_is_emulated(&ki->ki_md[idx])) {
			*kip = ki;
			return (idx);
		}
	}
	return (-1);
}

/*
 * The SIGTRAP handler: probe context.  Only the core, direct memory accesses
 * and raw system calls from here on.
 */
void
kh_isa_trap(int sig, siginfo_t *si, void *arg)
{
	ucontext_t *uc;
	const struct kinst_md *md;
	struct kh_inst *ki;
	struct kinst_regs kr;
	long idx;

	uc = arg;
	kh_dbp_regs_in(uc, &kr);
	ki = NULL;
	if (si->si_code != TRAP_BRKPT) {
		kh_pass_on(sig, si, arg);
		return;
	}
	if ((idx = kh_probe_at(kr.kr_pc, &ki)) < 0) {
		if ((idx = kh_dbp_tramp_at(kr.kr_pc, &ki)) < 0) {
			kh_pass_on(sig, si, arg);
			return;
		}
		/* The trampoline ran the instruction: on after the probe. */
		kr.kr_pc = kinst_core_resume(&ki->ki_md[idx], ki->ki_addr[idx]);
		kh_dbp_regs_out(&kr, uc);
		return;
	}
	__atomic_fetch_add(&kh_hits[idx], 1, __ATOMIC_RELAXED);
	kh_hit((uintptr_t)kr.kr_pc - ki->ki_bias, uc);
	md = &ki->ki_md[idx];
	if (!kinst_core_is_emulated(md))
		kr.kr_pc = (uintptr_t)(ki->ki_tramp +
		    (uintptr_t)idx * KINST_TRAMP_SIZE);
	else if (kinst_core_emulate(md, kr.kr_pc, &kr) != 0) {
		/* Cannot happen for a table entry; do not run on blindly. */
		kh_pass_on(sig, si, arg);
		return;
	}
	kh_dbp_regs_out(&kr, uc);
}

/*
 * Trampoline memory: anywhere.  Unlike amd64's, these trampolines hold no
 * PC-relative instruction (those are emulated) and end in a breakpoint,
 * not a jump, so nothing has to be within reach of the image.
 */
uint8_t *
kh_isa_tramp_alloc(uintptr_t lo, uintptr_t hi, size_t len)
{
	size_t pg;
	void *m;

	(void)lo;
	(void)hi;
	pg = (size_t)sysconf(_SC_PAGESIZE);
	len = (len + pg - 1) & ~(pg - 1);
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
	    -1, 0);
	return (m == MAP_FAILED ? NULL : m);
}

int
kh_isa_tramped(const struct kinst_md *md)
{

	return (!kinst_core_is_emulated(md));
}

const char *
kh_isa_prepare(const struct kinst_md *md, uintptr_t live, uint8_t *tramp,
    char *why, size_t len)
{
	int err;

	(void)live;
	if (kinst_core_is_emulated(md))
		return (NULL);
	if (tramp == NULL)
		return ("no trampoline memory");
	err = kinst_core_tramp_fill(md, tramp);
	if (err == 0)
		return (NULL);
	snprintf(why, len, "trampoline fill: error %d", err);
	return (why);
}

/* Write the probe's breakpoint: kinst_core_patch() says what and how long. */
void
kh_isa_patch(const struct kinst_md *md, uintptr_t live)
{
	kc_uint8_t bp[KINST_PATCH_SIZE];
	int i, n;

	n = kinst_core_patch(md, bp);
	for (i = 0; i < n; i++)
		((volatile uint8_t *)live)[i] = bp[i];
}

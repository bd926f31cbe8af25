/*-
 * SPDX-License-Identifier: BSD-2-Clause
 *
 * kinst_dbp_tramp.c: the trampolines of the "double breakpoint" ISAs, arm64
 * and riscv: what ../kinst_tramp.c, which gives out the slots, asks of an
 * ISA part (kinst.h's kinst_isa_tramp_needed(), _tpage_alloc(),
 * _tpage_free(), _tramp_fill()), and the count of threads inside
 * trampolines that makes unload safe.  A trampoline holds the probed
 * instruction and then the trampoline's own breakpoint
 * (kinst_core_tramp_fill()); the breakpoint handler (kinst_dbp.c) sends a
 * thread into it with kinst_tramp_enter() and, at its breakpoint, asks
 * kinst_tramp_leave() where the thread resumes.  The breakpoint is known by
 * its address (kinst_tramp_resume_at()).
 *
 * Unload.  A thread inside a trampoline needs two things that go at unload:
 * the page, and this module's breakpoint handler to answer the
 * trampoline's breakpoint (without it that is an unhandled kernel
 * breakpoint, a panic).  So kinst_tramp_inflight counts the threads sent
 * into a trampoline and not yet back, and kinst_tramp_quiesce(), called at
 * MOD_UNLOAD after dtrace_unregister() has disarmed and destroyed every
 * probe and after a dtrace_sync() (no CPU is still in the handler about to
 * send one in), says whether the count is zero, at once: MOD_UNLOAD holds
 * the kernel linker's kld_sx, which every kldload, kldstat and stack(9)
 * symbol lookup waits for, so it never sleeps there.  Only when the count
 * is zero does the unload remove the handler and kinst_tramp_fini() free
 * the pages; otherwise it is refused with EBUSY, everything kept, and
 * kldunload may be asked again later.  The count is conservative, not
 * exact: a thread that leaves a trampoline other than through its
 * breakpoint -- an exception whose handler does not return to the
 * trampoline, such as a fault on a trampolined load recovered through
 * pcb_onfault to the copyin(9)-style caller's error path -- is never
 * counted out, and from then on every unload of this module is refused
 * until reboot.  That leaks the module, never a page a thread may still
 * run.
 */

#include <sys/param.h>
#include <sys/systm.h>
#include <sys/kernel.h>
#include <sys/linker.h>
#include <sys/lock.h>
#include <sys/malloc.h>
#include <sys/sx.h>

#include <sys/dtrace.h>

#include <vm/vm.h>
#include <vm/vm_extern.h>

#include <machine/atomic.h>

#include "kinst_core.h"
#include "kinst.h"
#include "kinst_dbp.h"

static volatile u_int	kinst_tramp_inflight;	/* see the top */

/* Emulated kinds need no trampoline. */
bool
kinst_isa_tramp_needed(const struct kinst_probe *kp)
{

	return (!kinst_core_is_emulated(&kp->kp_md));
}

/* A page of the kernel map, read, write and execute: its own alias. */
uint8_t *
kinst_isa_tpage_alloc(uint8_t **write)
{

	*write = kmem_malloc(PAGE_SIZE, M_WAITOK | M_EXEC);
	return (*write);
}

void
kinst_isa_tpage_free(uint8_t *page)
{

	kmem_free(page, PAGE_SIZE);
}

/* [instruction][breakpoint], resuming after the probe's instruction. */
const char *
kinst_isa_tramp_fill(const struct kinst_probe *kp, uintptr_t tramp __unused,
    uint8_t *buf, uintptr_t *resume)
{

	if (kinst_core_tramp_fill(&kp->kp_md, buf) != 0)
		return ("it is emulated, not run in a trampoline");
	*resume = kinst_core_resume(&kp->kp_md, (uintptr_t)kp->kp_patchpoint);
	return (NULL);
}

/* The breakpoint handler sends a thread into a trampoline. */
void
kinst_tramp_enter(void)
{

	atomic_add_int(&kinst_tramp_inflight, 1);
}

/*
 * If 'addr' is a filled trampoline's own breakpoint: the thread there is
 * back, and this is where it resumes.  0 if 'addr' is no trampoline's
 * breakpoint.  Probe context: no lock.
 */
uintptr_t
kinst_tramp_leave(uintptr_t addr)
{
	uintptr_t resume;

	resume = kinst_tramp_resume_at(addr, KINST_INSN_SIZE);
	if (resume != 0)
		atomic_subtract_int(&kinst_tramp_inflight, 1);
	return (resume);
}

/*
 * MOD_UNLOAD, kld_sx held, after dtrace_unregister() (every probe disarmed
 * and destroyed): true if no thread is inside a trampoline, false if one
 * still is (see the top comment).  Never sleeps.
 */
bool
kinst_tramp_quiesce(void)
{

	/* No CPU is still in the handler about to send a thread in. */
	dtrace_sync();
	return (atomic_load_acq_int(&kinst_tramp_inflight) == 0);
}
